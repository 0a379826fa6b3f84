// Package rs is the Runtime Supervisor role: the constitutive Session
// Coordinator process that runs in the Domain generation's own user, mount
// and network namespaces under a Host Coordinator lifetime lease.
//
// It prepares the filesystem (prepared lower, read-only bind, OCI bundle) and
// the network namespace, launches the attached, non-detached `runsc run`
// through its broker (the runsc client gets a parent-death edge to RS, and
// runsc's own sandbox and gofer processes have one to the client), proves
// the sandbox and gofer children of that exact client through their own
// pidfds and reports their identities, and tears everything down — by
// pidfd only, never through a runsc command that signals a state file's
// numeric pid — when HC asks, when the lifetime pipe reaches EOF (HC loss:
// the lease-loss path), or when runsc exits.
//
// The message sequence with HC is drawn in api/lazaret/v1/supervisor.proto.
// RS passes the first session's socket (--first-session-fd), which it
// neither reads nor writes, to the attached runsc as the init's
// ocispec.FirstSessionFD: HC and the init speak over it (pkg/hc's
// firstsession.go).
//
// Its egress proxy runs from the executable HC names with --roles-exe
// (lazaret-hc, which starts faster than this binary) once RS has checked it can exec that path in its own namespaces
// (rolesExecutable); otherwise from lazaret-rs, which hosts the same
// roles. Its Git-routing daemon, whose start is on the critical path of a
// cold start, runs from --git-routing-exe (lazaret-gitroute, smaller
// still) under the same check, else from this binary; the broker's
// wrapper role, started for every acquired child, runs from
// lazaret-gitroute too, else from the roles executable. Failpoint stages
// keep the name lazaret-rs (proc.NewBrokerWrapped).
//
// It links no image library (cmd/lazaret-rs TestLinksNoImageStack): a
// start whose image is a local layout (`oci:PATH[:TAG]`) or a registry
// reference pinned to a manifest digest (`docker://NAME@sha256:…`) with a
// Published prepared lower reuses it after reading the layout's index and
// manifest (package ocilayout) or taking the pinned digest
// (ocilayout.ReuseDigest: no registry request), and finding and holding
// the tree in the prepared store (prepared.LookupDigest) — the coordinator
// says in StartSandbox whether the Storage Catalog records it Published
// (resolveLower), so RS links no database (cmd/lazaret-rs
// TestLinksNoDatabase); any other start runs lazaret-cli's preparer
// role (--preparer-exe, package prepare's Main) as its child and relays
// its progress (ensureLower, runPreparer).
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # The sandbox
//
// `pkg/ocispec` builds the spec and `Check` verifies its security shape (and
// is tested against mutated specs): private pid/ipc/uts/mount/user namespaces
// (user with the full guest id range, see "Guest identities" below),
// network namespace by the verified RS path, no other namespace path,
// `noNewPrivileges`, the default container capability set without
// `CAP_NET_RAW` (and never `CAP_NET_ADMIN`/`CAP_SYS_ADMIN`), host bind mounts
// only `/workspace` (rw; the Git-routing daemon's mount by default), the Git
// Sentry below it, and `/.lazaret` (ro). runsc flags (`pkg/runsc`):
// `--ignore-cgroups --network=sandbox --overlay2=root:memory
// --file-access-mounts=shared`, never `--rootless` (it rejects the sandbox
// network) and never `--overlay2=all:*` (workspace writes would not reach the
// host). The other binds are the State Anchors (package anchor; each rw, exactly as
// declared, source in the bundle's `anchors/`), mounted before the
// per-generation resolver files (package netpolicy's doc) and the volumes so that those land on
// top of a persistent `/etc` or `/root`, never in it. The single-file binds
// StartSandbox names in `host_binds` (the sandbox key, the resolver files)
// RS makes itself over the same file beneath the enclosing rbind's source
// (hostbinds.go, after the anchors) and drops from the config.json runsc
// reads: one gofer mount fewer each; the guest sees the same files.
//
// # Resource limits
//
// Lazaret runs rootless, so runsc gets `--ignore-cgroups` and no host
// cgroup: runsc's own memory limit (it reads one only from the sandbox's
// cgroup, which also sizes the `--total-memory` it passes the sentry) and the
// OCI `linux.resources.memory.limit` (applied only to that cgroup) do
// nothing, and the guest's `/proc/meminfo` shows the host's memory. What
// bounds a Domain instead (profile keys `limits.*`, docs/CONFIG.md; HC
// resolves the defaults at each start from `/proc/meminfo` and logs the
// effective values as `resource limits`):
//
//   - Processes: OCI `process.rlimits` `RLIMIT_NPROC` (soft = hard) on the
//     init and every session's process document. The sentry enforces it
//     itself on every fork and clone, counting tasks per guest user; only
//     `CAP_SYS_ADMIN` or `CAP_SYS_RESOURCE` exempt a task, and guest processes
//     hold neither (nor can they raise a hard limit). Measured with 256:
//     `bash -c 'bomb(){ bomb|bomb; }; bomb'` stays at 256 guest tasks (about
//     640 host threads of the sandbox: systrap stub processes), its forks get
//     `EAGAIN`, and a host loop of `/bin/true` stays within twice its idle
//     time on two cores. The count is per guest uid (guest root can switch
//     uids); gVisor's own task ceiling (65,536) bounds the sum.
//   - Open files: OCI `RLIMIT_NOFILE` (soft = hard), per process, enforced
//     by the sentry. The sentry's host descriptors are bounded separately by
//     the hard `RLIMIT_NOFILE` it inherits (see `--dcache` in `pkg/runsc`).
//   - Memory: a watchdog in the Runtime Supervisor (`pkg/rs/memlimit.go`).
//     Every page of guest application memory (anonymous memory, tmpfs, the
//     in-memory root overlay, page cache of files without a host descriptor)
//     lives in the sentry's memfd `runsc-memory`; the systrap platform's
//     per-process context memory in `systrap-memory`. RS finds both among
//     `/proc/<sandbox>/fd` of the sandbox process it proved, samples their
//     committed pages (`st_blocks`; the sentry punches freed pages out) every
//     100 ms, trusting a sample only if the pidfd shows the process alive
//     after it, and over `limits.memory` SIGKILLs the sandbox and gofer through
//     their pidfds. It reports a `SupervisorFailure` with the figures; HC
//     marks the generation failed, and a non-interactive session whose
//     process was SIGKILLed prints that reason on its standard error before
//     exiting 137 (an interactive one exits 137; the reason is in `hc.log`). The
//     Domain then tears down as for any sandbox loss; the next run starts a
//     new generation. Measured: a Python loop of 100 MiB `bytearray`s under a
//     1 GiB limit is stopped at 1025–1027 MiB.
//   - Rejected after measuring. A host `RLIMIT_FSIZE` on the sentry does
//     cap its memory file (the guest allocation beyond it gets `SIGSEGV`),
//     but the memory file grows in 1 GiB chunks, the cap also applies to the
//     sandbox's writes to host files through donated descriptors, and the
//     systrap platform *panics the sentry* ("failed to allocate a new
//     subprocess context memory region") as soon as its context file cannot
//     grow — a few hundred guest processes reserve several GiB of it (sparse:
//     16 MB committed for 256 processes). A host `RLIMIT_NPROC` on the sandbox
//     counts its host threads (the sentry runs as your uid) and makes the Go
//     runtime of the sentry abort when it cannot start a thread. Host
//     `RLIMIT_AS`/`RLIMIT_DATA` would limit the sentry's own address-space
//     reservations, not guest memory. Root in this build environment lacks
//     `CAP_SYS_RESOURCE`, so these were applied with `prlimit` as the user
//     that owns the sandbox, which is also what RS could do.
//
// `lazaret status` adds the `limits` entry to a running Domain's document:
// limits, and usage from `runsc events --stats` (the sentry's own memory
// accounting and task count, which need no cgroup; the watchdog's committed
// figure is close to it but counts systrap's context pages too).
//
// # Guest identities (SR-12)
//
// The sandbox's user namespace maps the guest ids 0..65535 (uids and gids
// alike, `ocispec.IDMappings`) onto the Runtime Supervisor's namespace, whose
// own map is `0 → the developer, 1..65536 → the subordinate ids`:
//
//	guest 0          → RS 0          → the developer          (one extent)
//	guest 1..65535   → RS 1..65535   → subordinate start..+65534 (one extent)
//
// So every owner in a Debian image (`_apt` 42, `nobody` 65534, …) is mapped,
// root inside can chown to and create any guest user (`useradd`, packages
// that create system users, `chown` in build scripts, apt's own privilege
// drop to `_apt`), and a profile may run its sessions as a non-root user.
//
// Why two extents. The map used to be the size-1 `0:0:1`, because a single
// extent `0 0 65536` made runsc fail with `gofer: fork/exec /proc/self/exe:
// operation not permitted`. The root cause is in the kernel, not in runsc:
// runsc (ns-root of RS's namespace) starts the gofer with `CLONE_NEWUSER` and
// Go writes the spec's map to the child's `uid_map`; `map_write()`
// (kernel/user_namespace.c) translates each extent of a child map with
// `map_id_range_down()` into the parent's map, which succeeds only when the
// whole extent lies inside *one* extent of the parent. RS's ids 0 and
// 1..65536 are two extents (the developer, then the subordinate range), so
// `0 0 65536` spans both and the write fails with EPERM; `0 0 1` and
// `1 1 65535` each fit. Measured here with a 40-line Go program in an
// `unshare --map-users` namespace of the same shape: `0 0 65536`, `0 0 2` and
// `0 0 65537` fail, `0 0 1`, `0 1 65536`, `1 1 10` and `0 0 1` + `1 1 65535`
// succeed; runsc with the two-extent map starts and the gofer's and sentry's
// view of the ids is the full range.
//
// Image files keep their owners: the prepared lower is written in a user
// namespace of the same shape (statemaint), State Anchor uppers hold
// subordinate-uid files, and `lazaret state inspect` reports owners as guest
// ids (`anchor.GuestIDs`: the developer is guest 0, subordinate id start+k is
// guest k+1), `state verify` names the guest id first and the host id after
// it. `verify` still refuses device nodes, setuid/setgid files of the host
// user (guest root) and owners outside the map.
//
// The session user. A profile's `user` (default `root`) is resolved by
// `config.Profile.SessionUser`: a non-root name gets uid = gid = `user_id`
// (1000 by default) and home `/home/<name>`. The guest init
// (`pkg/guestuser`, called by `pkg/sandboxinit` before it reports ready)
// adds the user, its group, its shadow entry and its home (from `/etc/skel`)
// when the image lacks them; they lie under the default State Anchors `/etc`
// and `/home`, so this happens once per Domain. A contradiction (the name
// exists with another uid, or the uid belongs to another name, as uid 1000
// is `node` in the Node images) stops the start with the `user`/`user_id` to
// set: the init prints `lazaret-init-error: …` and RS returns it as the
// start's error. Sessions run as that user (`ocispec.Process.UID/GID`, no
// effective or permitted capabilities, `HOME`/`USER`/`LOGNAME` unless the
// profile sets them); `lazaret run --user root` runs one session as guest
// root (HC refuses any other name). Every guest user reaches the control
// mount: `/.lazaret` and `/.lazaret/bin` are 0755, the mailbox request
// directory 0777 (a request is bound to its session by the Session Request
// Capability, not by its owner) and the sandbox's credential files 0644;
// host side all of them stay inside the private (0700) runtime directory.
//
// Workspace ownership (keep-id, `gitroute.Ownership`; Podman's
// `--userns=keep-id` is the reference). Every file the sandbox creates in
// `/workspace` — on the host or in Ignored Workspace State — is created by
// the Git-routing daemon and so belongs to the developer; a guest chown
// succeeds without changing the host owner (the daemon never calls chown),
// so the developer can always edit and delete what any guest user made. The
// daemon reports the developer's files as the profile's session user
// (`GitRoutingStart.owner_uid/gid`), so that user sees the workspace as its
// own; a chown is remembered per inode for the generation (gVisor's gofer
// chowns every new file to its creator, so a file `builder` creates is
// `builder`'s inside until the sandbox stops; after a restart it appears as
// the session user's again). Host files of other owners are reported as
// they are.
//
// Bound ignored directories (package ignoredbind, ignoredbinds.go) are the
// one place the guest's own ids reach the host: the sandbox writes the
// Ignored Workspace State copy directly, so a file a non-root guest user
// creates, or a guest chown, carries that id's subordinate id on the host
// while the generation runs, and for a non-root session user RS gives the
// bound directories (and what the developer owns in them) to that user
// before runsc starts. The same ownership rule holds whenever no generation
// runs: before any of that RS durably records the bound paths in the Domain
// Root (`ignored-binds.given`), and once the sandbox and gofer are proven
// gone it gives everything in them back to the developer (lchown, never
// following a symlink) and removes the record. A supervisor killed before
// that leaves the record; the next one gives the recorded paths back (all of
// Ignored Workspace State if the record is damaged) before it binds
// anything. Within a generation a guest chown there is real, as on a
// plain bind; after it, what the developer owns appears as root, or as the
// session user once given again, as through the daemon. Both walks
// (chowntree.go) read directories on parallel walkers: a dependency
// directory holds 10^5 entries, and the give is on the start's path, the
// give-back on the next start's (it waits for the Domain lock).
package rs
