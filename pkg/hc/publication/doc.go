// Package publication is the Host Coordinator's publication role: the
// point after which CLIs may register with a generation (spec §3.2).
//
// A generation publishes itself in three places, in this order:
//
//   - Begin writes the publication file CLIs pin (the Trust Anchor's
//     public part, 0600, by rename) and only then binds the control
//     socket (0600): a CLI that reaches the socket finds the publication
//     that authenticates it. Accept returns its connections, and Server
//     runs the socket's TLS (the Trust Anchor's configuration) over one.
//   - Commit records the publication participant once the sandbox is
//     Committed: Intent → Intent{control socket identity, configuration
//     fingerprint} → Committed{published at}, in the transaction the
//     coordinator gives it, which also commits the sandbox, the helper and
//     the network (one durable write for the whole publication). The
//     Domain Store's activation rules refuse it before every other
//     participant is active.
//   - Withdraw removes the file and closes the listener at teardown,
//     before the keys are dropped; Release then records the participant
//     ReleaseIntent → Clean. Clean does the same for a dead generation in
//     bootstrap recovery (its coordinator and socket are gone with it).
//
// The model's PublishDomain step is recorded by the coordinator when the
// generation runs, after Commit.
package publication
