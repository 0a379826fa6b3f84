// Package gitrouting is the Git-routing role of the Host Coordinator: the
// workspace's Git Sentry and the git_routing participant (the Git-routing
// FUSE daemon RS acquires, and its mount), the host Git configuration
// guard the daemon keeps read-only, and the Domain's sticky ignored paths
// (SR-4, SR-13, FR-9).
//
// The coordinator keeps one *Service per generation and reaches it through
// a narrow seam: Config names what the role needs (the Domain Store, the
// workspace and Domain paths, the guarded Git configuration paths, a way
// to acknowledge RS's staged ownership), never the coordinator itself. The
// role's lifecycle is
//
//	(BeginStickyScan, before the generation is recorded) →
//	StartSticky → Start (Git Sentry, bare Intent) → CommitStaged (daemon
//	Staged, acknowledged) → Ready (Prepared: daemon Committed, mount) →
//	Release → Clean (after RS is reaped) → EndSticky
//
// and Clean, at bootstrap, proves a dead generation's daemon absent and
// records the participant Clean (its mount died with RS's mount
// namespace). Store encoding: GitRoutingSnapshotV1 (daemon slot, mount
// identity).
package gitrouting
