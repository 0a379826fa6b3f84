// Package network is the Network Sidecar role of the Host Coordinator: the
// connectivity helper (slirp4netns, the helper participant) that gives the
// Runtime Supervisor's network namespace its tap, the generation's network
// policy and readiness (the network participant), host port forwards and,
// in the allowlist mode, the egress proxy RS runs.
//
// The coordinator keeps one *Service per generation and reaches it through
// a narrow seam: Config names what the role needs (the Domain Store, the
// broker that launches the helper, a way to acknowledge RS's staged
// ownership and to fail the Domain when the helper dies), never the
// coordinator itself. The role's lifecycle is
//
//	New → DerivePolicy → Prepare(RS netns) → Start (Intent, helper ready)
//	    → Commit(SandboxReady, in the publication's transaction) → Release
//	    → Stop → Finish (Clean)
//
// and Recover, at bootstrap, proves a dead generation's helper and RS
// absent and records both participants Clean. Failpoints
// lazaret-hc:helper-started and helper-stopped mark the role's crash
// windows; its commit is durable with the whole publication's
// (lazaret-hc:publication-committed, the coordinator's). Model actions (tla/MAPPING.md): StartSidecar is
// recorded by the coordinator when Ready reports the helper configured.
//
// Store encodings: the helper participant records HelperSnapshotV1 (netns,
// helper slot staged then committed, supervisor slot); the network
// participant records NetworkSnapshotV1 (netns, readiness fingerprint,
// policy digest, readiness evidence once committed).
package network
