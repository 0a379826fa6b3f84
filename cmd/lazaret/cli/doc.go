// Package cli implements the lazaret command: one file per verb (the run
// verb is package runverb, which this package includes). It is the full
// CLI, the lazaret-cli binary, which the lazaret front execs for every
// command line but `lazaret run` (package runverb says why). It talks to a
// Domain only through its Host Coordinator's control socket; it starts the
// Host Coordinator when it is the first session of a Domain.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Installation, versions and lazaret doctor (DX-5, OR-4)
//
// Layout. `make install PREFIX=/usr/local DESTDIR=…` (recipe
// `install-files`, which packagers can run on binaries they built) puts
// `lazaret` (the front) in `PREFIX/bin` and `lazaret-cli` (this package),
// `lazaret-hc`, `lazaret-rs`, `lazaret-escalate`
// and the pinned `runsc` (when built) in `PREFIX/libexec/lazaret`; the man page
// (`lazaret man`, generated from the urfave/cli command tree) in
// `share/man/man1/lazaret.1`; completions in
// `share/bash-completion/completions/lazaret`, `share/zsh/site-functions/_lazaret`
// and `share/fish/vendor_completions.d/lazaret.fish` (`lazaret completion
// SHELL`). The Host Coordinator copies `lazaret-escalate` from where it finds
// it into the sandbox's control mount (`/.lazaret/bin`). `make dist` makes one
// reproducible tarball per binary (paths relative to PREFIX; sorted, fixed
// owner and `SOURCE_DATE_EPOCH` mtime, `gzip -n`) and `SHA256SUMS`.
// `make uninstall` (same `PREFIX`/`DESTDIR`) removes exactly those files and
// `PREFIX/libexec/lazaret` when empty, never the shared directories
// (`TestInstall` checks the tree is again what it was before the install);
// each user's data goes first with `lazaret rm --all --images --yes` (package
// anchor's doc, "State Anchors, reset and GC").
//
// Finding the binaries (`pkg/locate`): for a program NAME, (1) the
// override `LAZARET_<NAME>` (`LAZARET_CLI`, `LAZARET_HC`, `LAZARET_RS`,
// `LAZARET_ESCALATE`, `LAZARET_INIT`, `LAZARET_RUNSC`), then (not for `lazaret-cli`, which
// the front finds before reading any configuration) the host configuration's
// `[programs]` table (the CLI folds it into the getenv it gives
// `locate.Find`, `runverb/programs.go`, and
// passes configured paths to the Host Coordinator, which never reads the
// configuration file, as `LAZARET_<NAME>`) — an override that is not an
// executable file is an error, never skipped; (2) beside the running
// executable; (3) `PREFIX/libexec/lazaret`, PREFIX being the executable's
// directory's parent; (4) `PATH`.
//
// Builds. `CGO_ENABLED=0 go build -trimpath` — every binary is static
// (`lazaret-escalate` must run inside any image). `make` stamps
// `git describe --always --dirty` into `pkg/release.Version`. `lazaret
// version` asks each helper it finds for its own version (the hidden first
// argument `--lazaret-release`, answered before any role dispatch, spawned
// through the broker), reads runsc's gVisor module version from its Go build
// information (`debug/buildinfo`, no spawn) and prints the control protocol
// version, so a mixed installation is visible.
//
// Doctor. `cmd/lazaret/cli/doctor.go` runs every check independently and
// lists each failure with its remedy; the checks live in `pkg/hostcheck`
// (`hostcheck.go`: root, kernel and qualified build, subordinate ids,
// newuidmap/newgidmap, `/dev/net/tun`; `prereq.go`: pidfs probe, user
// namespaces including Ubuntu's `kernel.apparmor_restrict_unprivileged_userns`
// — the probe decides, the sysctl only selects the remedy, which is an
// AppArmor profile naming the installed binaries — pinned runsc version,
// slirp4netns version, Storage Root and runtime root filesystem type and free
// space, stale Domains). Everything that needs a process, a statfs or a Domain
// scan is a `hostcheck.Probes` function; `doctor_probes.go` supplies the real
// ones (spawning through the broker: the pidfs host support probe and a
// `CLONE_NEWUSER` child with `lazaret-hc` as the broker's self, `slirp4netns
// --version`), and unit tests inject failing ones for each remedy. A Domain
// needs recovery when no coordinator holds its lifecycle `flock` yet its
// runtime directory remains; its next `lazaret run` recovers it. Whether a
// coordinator holds that lock is read from `/proc/locks` by every command
// that asks (status, doctor, ls, rm, `logs --follow`, `network log
// --follow`: domainlock.go), never by taking the lock, which could make a
// starting run fail its attempt.
//
// Aliases. `lazaret alias [--shell bash|zsh|fish] [PROFILE[=COMMAND]…]`
// prints one shell function per profile running `lazaret run --profile
// PROFILE -- COMMAND "$@"` in the current directory; it calls `command
// lazaret` when `PATH` finds this very binary, else its absolute path.
package cli
