// Package sessions is the Host Coordinator's Client Session registry: the
// sessions of one generation, how many are admitted, whether any ever
// was, whether `lazaret stop` is ending them, and the linger a Domain
// keeps after its last session left.
//
// The registry decides; the coordinator acts. Admission, leave and stop
// report what the generation must do (refuse, tear down, linger) and the
// coordinator records the model-trace steps (RegisterSession,
// DisconnectSession, BeginTeardown) and moves its state.
//
// A Registry is not locked by itself: every method is called with the
// coordinator's lock held, the lock that also guards the generation's
// state, so an admission and a teardown decision are one step. The
// linger timer runs Config.LingerExpired without that lock; it takes the
// lock and calls LingerEnded.
package sessions
