// Package failpoint is Lazaret's fault-injection seam. Production builds
// compile every Hit to nothing; binaries built with the build tag
// `lazaret_failpoints` (integration tests only) read LAZARET_FAILPOINT and
// SIGKILL their own process, through its pidfd, when execution reaches the
// named stage. A hit is logged first, so a test can prove the stage was
// reached rather than passing vacuously. A hit waits for the sections
// Hold covers in other goroutines: a step the model trace records just
// before it becomes durable (the prepared-lower lease's InsertLease, under
// storage-catalog.lock) is never cut from its commit by a kill elsewhere
// in the process.
//
// Stage names are "<process>:<stage>", e.g. "lazaret-hc:acquire:rs:staged",
// "lazaret-rs:runsc-ready", "wrapper:session_exec:armed".
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Fault injection, process guard, kernel qualification
//
//   - `pkg/failpoint`: binaries built with `-tags lazaret_failpoints`
//     (`make build-failpoints`, `bin-fp/`) SIGKILL themselves at a stage named by
//     `LAZARET_FAILPOINT` (a comma-separated list arms several, e.g. one in RS
//     and one in HC to crash both): every CausalChildAcquisitionV1 step of every acquired
//     child (RS, connectivity helper, attached runsc, session exec clients,
//     Git-routing daemon) in the broker and in the wrapper, and the
//     coordinator's and supervisor's start-up, publication and teardown stages.
//     `integration/TestFaultInjectionRecovery` runs all 72 (State Anchor mount
//     and unmount, every prepared-lower lease acquisition and release step,
//     Git-routing daemon mount, crash and stop included): the
//     stage must be reached, nothing may remain, and the next run must succeed.
//   - `pkg/procguard`: a go/analysis checker run over every package the four
//     binaries link (dependencies included) that reports any process spawn,
//     wait, reap or signal API outside the broker and an explicit, justified,
//     never-stale allow-list, and, in Lazaret's own packages, any runsc argv
//     with `kill --all` or `delete` (no allow-list).
//   - Kernel qualification: a build is exactly qualified by the list compiled
//     into every binary (`pkg/hostcheck/qualified-kernels.txt`, builds the
//     project qualified) or by a host qualification record (`pkg/hostcheck`,
//     records.go): versioned JSON with the build, boot ID, date, product version
//     and the suite's full output, read from `/etc/lazaret/kernels.d` (root
//     alone trusted) and the developer's `$XDG_CONFIG_HOME/lazaret/kernels.d`
//     (root or the developer). `pkg/trusteddir` opens them: the canonical path
//     walked from `/` with `openat(O_NOFOLLOW|O_DIRECTORY)` on each verified
//     parent descriptor, every component checked by `fstat` (owner root or the
//     trusted uid; no group/other write but on a root-owned sticky ancestor),
//     files regular, one link, not group/other-writable; records inside a
//     writable mount source of the Domain are refused too. `lazaret kernel
//     qualify` runs `proc.(*Broker).QualificationSuite` in a child of the
//     `lazaret` binary (hidden role `proc.QualifySuiteArg`, with the wrapper and
//     the parent-death broker roles beside it), streams its lines, and writes
//     the record atomically (temporary file, fsync, rename, directory fsync).
//     The CLI (`lazaret run`, `doctor`) and HC check the build before any
//     resource exists; `make run`/`make test` call `scripts/setup.sh kernel`
//     (`lazaret kernel qualify --if-needed` as root). Each boot, the first HC
//     runs the PidfsHostSupportProbe
//     (`proc.(*Broker).PidfsHostSupportProbe`) and caches success under the
//     boot ID in the Storage Root. `pidfs.RecoveryMatch` is PidfsRecoveryMatch.
package failpoint
