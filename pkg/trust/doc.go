// Package trust is the per-generation Trust Anchor (spec §3.2 "Protocol
// cryptography refinement"): the Host Coordinator's ephemeral TLS CA and
// protocol-issuer keys, the signed Trust Manifest binding both to the
// generation identity, the Session Coordinator's TLS and protocol leaf
// keys, the Agent Sandbox request-signing key, Protocol Credentials, Client
// CLI enrollment (CSR → one-hour clientAuth leaf), client certificate
// verification, Session Anchors and Session Request Capabilities, and the
// TLS 1.3 configurations of the control socket. It is pure crypto: no
// files, processes or sockets; time and randomness are injected.
//
// Keys (all Ed25519, all generated per generation, none persisted):
//
//	TLS CA key              signs the coordinator TLS leaf and client leaves
//	protocol-issuer key     signs Protocol Credentials
//	coordinator TLS key     the control socket's serverAuth leaf
//	coordinator protocol key signs Session Request Capabilities (credential
//	                        role session-coordinator)
//	sandbox key             the Agent Sandbox's request-signing key
//	                        (credential role agent-sandbox); the only
//	                        private key that may enter the sandbox
//	Session Anchor key      per session, generated and held by the CLI
//	client TLS key          per CLI, generated and held by the CLI
//
// Signed records are JSON claims carried as exact bytes with their
// signatures and verified before they are parsed. Each signature covers
//
//	"lazaret/v1/" + record name (lower kebab) || uint64 big-endian length || bytes
//
// (spec §3.7), so a signature over one record type never verifies as
// another.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Control plane
//
// Per generation, HC creates a Trust Anchor (`pkg/trust`): an Ed25519 TLS CA
// and a separate protocol issuer, a Trust Manifest signed by both and bound to
// the generation identity (Domain ID, generation, coordinator ID, profile,
// fingerprint), the coordinator's TLS leaf (serverAuth only,
// `coordinator.lazaret.invalid`) and protocol credential, and the sandbox's
// request-signing key and credential. Before it listens, HC writes the
// publication (CA, manifest, leaf; no private key) to `publication.json` in the
// 0700 runtime directory. A CLI:
//
//  0. opens the runtime root and the Domain runtime directory with
//     `trusteddir.OpenPrivate` (no symlink followed, each beneath its verified
//     parent, owner the developer, mode 0700), reads `publication.json` and
//     dials `control.sock` through that descriptor (`/proc/self/fd/N/…`), and
//     requires `SO_PEERCRED` of the listener to be the developer; anything else
//     exits 125 before a byte is sent. Without `XDG_RUNTIME_DIR` the runtime
//     root is `$XDG_STATE_HOME/lazaret/run` (`domain.DefaultRoots`);
//  1. verifies the publication against its CA and reads the generation identity
//     from the manifest (it must name the CLI's Domain and profile);
//  2. connects with TLS 1.3 (ALPN `lazaret-control/1`, no resumption) and no
//     client certificate: such a connection may only send one `EnrollRequest`
//     (a CSR of at most 8,192 bytes for an in-memory Ed25519 key) and receives a
//     one-hour clientAuth leaf bound to a new Client CLI ID and the generation;
//  3. reconnects with that leaf, and sends its `RunRequest` (or
//     `StatusRequest`) with a session registration signed by a fresh Session
//     Anchor key (pkg/client dials this connection and starts its handshake
//     while it enrolls; the handshake presents the leaf once it is issued); HC answers `Accepted` with the Session Request Capability it
//     signed, which the guest command also receives
//     (`LAZARET_SESSION_CAPABILITY`).
//
// The sandbox's credential files (its key, credential, the manifest and the
// coordinator's credential) are read-only under `/.lazaret/credentials`: the
// public three as files of the read-only control mount, the key as a
// single-file bind of its own; once the sandbox runs, HC unlinks the key's
// source and forgets the key (a later session still reads it inside: the
// mount holds the file). Teardown withdraws the publication before `Anchor.Destroy`.
package trust
