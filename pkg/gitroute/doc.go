// Package gitroute is the Git-routing daemon (spec §3.4, SR-13): a FUSE
// filesystem that presents the Agent Workspace to the sandbox and serves
// every Git-ignored path from Domain-scoped Ignored Workspace State
// instead of the host.
//
// Routing. Each path is classified once per generation by the immutable
// ignorerules snapshot taken at daemon start (plus: any ".git" below the
// top level is treated as ignored, so a nested repository or gitfile the
// sandbox plants is never seen by host Git; so is a top-level ".git" the
// host did not have). With ignored-path isolation disabled the daemon
// still serves the whole workspace, with no ignore rules: only those Git
// names and the hidden names go to state. An ignored path lives below
// the state directory, everything else below the host workspace. A
// directory listing merges the host's non-ignored entries with the state's
// ignored ones; existing host content at ignored paths is never opened.
//
// Git Sentry name policy. New Git-directory files host Git would obey
// (denied) are refused with EPERM; the generation's host Git configuration
// guard (Guard, guard.go) keeps what host Git reads or runs from the
// workspace read-only (EROFS).
//
// Confinement. The daemon holds one O_PATH descriptor for each backend root
// and resolves every path with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS), then acts with *at calls on a single name in the
// resolved parent (AT_SYMLINK_NOFOLLOW where the call follows). Symlinks
// are served as symlinks for the sandbox's kernel to resolve inside the
// sandbox; the daemon never follows one, so no symlink or rename race makes
// it touch a path outside the workspace or the state directory.
//
// Directory handles re-list on rewind (seekdir 0): gVisor's gofer rewinds
// open directory descriptors, and a snapshot per handle would hide new files.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Workspace, Git Sentry and Ignored Workspace State
//
// HC computes the Git Sentry (`pkg/gitsentry`) from the host repository
// before each generation and `pkg/ocispec` adds it, parents first, below
// `/workspace`: `.git` as its own bind (so `mv .git`, `rmdir .git` fail with
// EBUSY), `.git/config` and an existing `.git/config.worktree` read-only
// (EROFS; `git config` renames onto them → EBUSY), `.git/hooks` transient
// tmpfs, `.git/info` read-only, and for every submodule Git directory
// (`.git/modules/…`, recursively) and linked-worktree directory
// (`.git/worktrees/W`) the same: its own bind, config / `config.worktree` /
// `commondir` / `gitdir` read-only, hooks tmpfs. Existing
// editor configuration (`config.EditorConfigDirs`) is tmpfs (directories) or
// read-only (files) unless `share_editor_config`. `ocispec.Check` accepts a
// protected bind only at the same workspace path (on the host or through the
// daemon), with the planned read-only flag. A workspace whose `.git` is a
// gitfile pointing outside it (a linked worktree) is refused (SR-3) with the
// opt-in's name (`git_common_dir`, `lazaret run --git-common-dir`).
//
// With the opt-in, `gitsentry.Compute` checks that the gitfile names
// `<common>/worktrees/<name>` whose `commondir` names `<common>` (symlinks
// resolved; workspace and common directory must not contain one another) and
// plans the gitfile read-only plus `Sandbox.GitCommonDir` /
// `CommonProtected`: the common directory bound at its own absolute path
// (like a developer-configured volume, after the volumes), stricter than a
// workspace `.git` because no daemon serves it (the daemon's name policy is
// what refuses a new `commondir`/`config`/`config.worktree` in a workspace
// `.git`): the directory itself read-only (so nothing can be created at its
// top level, `modules/*` and other worktrees included), `config` read-only,
// `hooks` tmpfs, `info` read-only, and read-write only `objects`, `refs`,
// `logs` and this worktree's `worktrees/<name>` with its `commondir`, `gitdir`
// and `config.worktree` read-only (an absent `config.worktree` is created
// empty on the host so it can be covered). `ocispec.Check` accepts those binds
// only with source = destination beneath `GitCommonDir`, which may not
// overlap `/workspace`, the control directory, the resolver files or cover a
// State Anchor. The daemon's rules follow the gitfile
// (`ignorerules.GitDirs`: the worktree's own index, the common `info/exclude`
// and `config`).
//
// Mount points (`pkg/mountskel`). runsc's gofer creates every bind's
// mount point on the host side of the sandbox root and fails beneath the
// read-only prepared lower (measured: `mkdir(...) read-only file system`);
// beneath a State Anchor it would create it in the persistent upper. RS
// therefore computes, from the spec it is about to run, the bind destinations
// that hang off the root or an anchor (not off another Lazaret mount) and are
// missing in the lower (`mountskel.Needed`; a destination through a symlink
// or file of the image is refused), builds `bundle/skeleton` holding just
// those chains (existing image directories copied with owner and mode,
// because an overlay shows the topmost layer's attributes) and mounts
// `bundle/rootfs` as the read-only overlay `lowerdir=skeleton:lower` (no
// upper). Anchors take their lower from that root, so the chain is lower
// content beneath `/home` too: the shared prepared lower and persistent
// uppers are never written, and the skeleton is deleted with the generation.
// Without such a bind the root stays the plain read-only bind.
//
// The Git-routing daemon (`pkg/gitroute`, hidden role
// `__lazaret-git-routing` of `lazaret-gitroute`, the executable HC names in
// RS's `--git-routing-exe`, as its start is on the critical path of a cold
// start; `lazaret-rs` hosts the role too, for when RS cannot exec the named
// one in its namespaces) is acquired by RS through its
// broker as the `git_routing` participant: HC records bare Intent when it
// builds `StartSandbox`, RS stages the daemon's pidfs identity with HC (signed
// `StagedProcessOwnership` slot `git_routing`, exact echo), the wrapper
// releases it, it mounts FUSE directly (ns-root of RS's userns, `allow_other`,
// `/dev/fuse` must be usable) at `RuntimeDir/workspace` in RS's private mount
// namespace (it never touches its own mount, so a SIGKILL always reaps it:
// see serve in daemon.go), then keeps only `gitroute.FileCapabilities` (the file permission
// overrides; `capability.Keep` on every thread, `no_new_privs`; its bounding set
// went at its start, `capability.Bound`, while it had few threads) and prints a
// ready line — RS, not the daemon, unmounts at teardown; RS reports the daemon identity and the
// mount (statx mount ID, fs dev, mount point identity) in `SandboxReady`, and
// HC commits the participant `Prepared`. The spec binds the mount at
// `/workspace` and the Git directories (`.git`, `.git/modules/M`,
// `.git/worktrees/W`) from it, so the daemon's name policy applies there: a
// new `commondir`, `config`, `config.worktree`, `hooks`, `gitdir` or `modules` at a Git
// directory level, or a new entry directly below `.git/modules`, a
// submodule's `modules` or `.git/worktrees`, is refused with EPERM (host
// Git would follow or obey it). The mounts are made at start; a Git
// directory the host makes while the Domain runs (`git submodule add` on
// the host) reaches the sandbox through the daemon alone, so the daemon
// also refuses by path any change of a Git directory's control paths
// (EROFS; gitadmin.go) and a directory moved below `.git/modules` or
// `.git/worktrees` (EXDEV: the caller copies, and the copy's control names
// are refused). Each refusal is logged once, a bounded number per
// generation, with the path and what to do instead;
// a top-level `.git` the host did not have is the sandbox's own repository
// in Domain state, where the policy does not apply (`git init` works).
//
// Host Git configuration guard (`pkg/gitconfigguard`, SR-4). Mounts
// cover what exists in `.git`; what host Git runs or reads from elsewhere
// in the workspace is named by its configuration. HC reads that
// configuration with the developer's own Git, through its broker, at
// generation start (the same run gives the guests the developer's
// identity): `git config --show-origin --show-scope -z --list` in the
// workspace (system, global, repository, worktree files and includes, as
// host Git resolves them), `git --git-dir=D config …` for every submodule
// and linked-worktree Git directory, and `git config --file F --includes`
// for each include Git did not follow (a condition that did not match), to
// Git's depth limit of 10. Running Git rather than parsing the files keeps
// Git's own file discovery, quoting and include resolution; no Git on the
// host is nothing to guard; a Git that fails (a malformed file) fails the
// start with Git's message. `gitconfigguard.Compute` turns the entries into
// workspace paths (the exact list is in docs/SECURITY.md): every
// configuration file read, every `include.path`/`includeIf.*.path` file, the
// `core.hooksPath` directory, and the programs of command-valued keys (the
// first word of each simple command of a conservative shell reading, plus an
// interpreter's script; only words with a slash, relative ones from the
// repository's working tree); through a symlink both the name and its
// target. HC passes them in `GitRoutingStart` (`guarded_files`,
// `guarded_trees`); while the Domain runs, HC stats what the result depends
// on (`gitconfigguard.Result.Watch`) every second, runs host Git again when
// one changed, and sends a changed guard (`GitGuardUpdate`), which RS writes
// to the daemon's guard pipe (`--guard-fd`, `GuardUpdate` lines) and the
// daemon puts in force whole (`Router.SetGuard`). The daemon refuses every
// change of a guarded path served from the host — create, write, truncate, chmod/chown/utimes, link
// to it or from it, unlink, rename either way — with EROFS, and a rename of
// a directory holding one, or onto such a name, with EXDEV (the caller
// copies, and the copy's guarded name is refused), existing or not. A
// guarded path routed to state is the sandbox's own copy and stays
// writable. The guard is enforced by the daemon rather than by read-only
// binds because most such paths are missing or may be Git-ignored (a bind
// of the host file would expose ignored host content, SR-13, and a missing
// path cannot be a mount point without creating it on the host).
//
// Routing (`pkg/ignorerules`): at daemon start the host's rules (every
// `.gitignore` outside ignored directories, `.git/info/exclude`,
// `core.excludesFile` resolved by HC) and the index's tracked paths are read
// once and compiled to regular expressions. The index and the global files
// are read before the mount. The `.gitignore` files are those HC's start
// scan of the sticky ignored paths read (`--rules-snapshot`,
// `ignorerules.ReadSnapshot`: the same rules as the sticky record's, no
// second walk; none inside a routed directory, where every path is routed
// anyway); without a snapshot the daemon walks the whole workspace for
// them (tens of milliseconds per few thousand directories) behind the
// mount, while runsc boots, and until that walk ends no decision is taken
// from the rules (`Routing.Ignored` waits). Either way the daemon then
// prints a second line (`RulesLine`), and RS reports the sandbox ready only
// after it. Rules that cannot be read end the daemon (`RulesErrorPrefix`
// and the reason), and RS refuses the start with that reason. A path is ignored when it is
// not tracked, not an ancestor of a tracked path, and a pattern excludes it or
// one of its ancestors (gitignore precedence: last match in a file wins;
// deeper `.gitignore` beats shallower beats `info/exclude` beats
// `core.excludesFile`; dir-only patterns use the entry's type). Also routed to
// state: any `.git` below the top level (nested repositories and gitfiles, so
// host Git in such a directory never finds a planted config or hook), a
// top-level `.git` when the host had none, and absent editor-configuration
// names, with isolation on or off. Ignored paths live below `DomainRoot/ignored-state` (parents
// created on demand), everything else on the host; a listing merges the
// host's non-ignored entries with the state's ignored ones; host content at
// ignored paths is never opened. The snapshot never changes during the
// generation, so sandbox edits to `.gitignore` or `git add -f` cannot expose
// host content that was ignored at generation start. The rules of the *next*
// generation are the host files then, which the sandbox may have edited, so
// ignored paths are sticky (`pkg/stickyignore`, SR-13: only trusted
// configuration turns isolation off): `<DomainRoot>/ignored-sticky.json`
// (versioned, newer refused, replaced by fsynced temp file + rename + directory
// fsync, written only under the Domain lock) lists the paths that were routed
// to state at an earlier generation's start or end, and the daemon
// (`--sticky-root`, read at mount) routes each of them and everything below
// it to state whatever the rules or the index now say. HC fills it twice per
// generation with `stickyignore.Scan`, which walks the host workspace and the
// state together beneath descriptors (`openat2` without symlinks, `.git`
// skipped) and returns every existing path the rules or the record route, at
// the router's granularity (the topmost routed entry: `.venv`, `.env`,
// `src/__pycache__`; mirror directories are descended into): at start, in a
// goroutine beside RS's start-up, which `pkg/hc/gitrouting` `(*Service).Start` waits for before
// asking for the daemon (a failure fails the generation; hc.log's `sticky
// ignored paths scanned` has `scan_ms` and `waited_ms`;
// `BenchmarkScan5000` times the scan), and at teardown, after the daemon is gone, with the
// generation's own rules snapshot (ignored content the host created
// meanwhile; best effort — a killed coordinator leaves the start record). Nothing is ever removed but by
// the CLI: `state ignored release PATH` (and `reset`, for what it resets),
// with the Domain stopped. A sticky path the host now tracks stays routed
// (listed as tracked); one the rules no longer ignore is noted on the
// terminal at `lazaret run`. Edge cases: renaming a host directory
// that holds hidden ignored entries returns EXDEV (the caller copies), so the
// hidden content never moves to a visible path; `rmdir` of such a directory
// fails ENOTEMPTY; a rename between a routed and a host path returns EXDEV;
// a submodule's gitfile is routed away like any `.git` below the top level,
// so Mount seeds the state with a copy of each submodule's host gitfile
// that names the workspace's own `.git/modules/…` (the index's gitlinks;
// Router.SeedSubmoduleGitfiles; a copy the state has is kept), and gives
// the gitfile of a submodule the host sets up while the Domain runs when
// the sandbox first looks for it or the host writes it in a directory the
// kernel knows (seedLate, once per path and generation): Git works in
// the submodule's working tree inside, on its Git directory, which the Git
// Sentry guards, and host Git keeps reading the host's gitfile. `git
// worktree add` and `git submodule init` of a new submodule inside fail (the
// new gitfile or Git directory would be the sandbox's): use the host.
//
// Confinement: the daemon holds O_PATH descriptors of the two roots and
// resolves every path with `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS)`, then acts with `*at` calls on one name
// (`AT_SYMLINK_NOFOLLOW`; chmod/truncate/utimes through `/proc/self/fd` of an
// O_PATH descriptor of the exact inode). Symlinks are served as symlinks and
// resolved by the guest kernel. Directory handles re-list on rewind.
//
// Caching: the mount is a host-kernel FUSE mount (the sandbox reaches it
// through runsc's gofer with ordinary host syscalls; gVisor's own FUSE client
// is not involved), so the kernel's entry, negative-entry, attribute and page
// caches apply, and `--file-access-mounts=shared` revalidates every guest
// dentry with a host stat that the kernel answers from them. Every FUSE
// request is a round trip between two processes, which on these machines
// costs far more than the daemon's own work, so the daemon is built to be
// asked as little as possible (pkg/gitroute/fileio.go, watch.go):
//
//   - No opens. The first file OPEN is answered ENOSYS, so the kernel stops
//     sending OPEN and RELEASE for files (`no_open`) and keeps page caches
//     across opens. READ/WRITE/FSYNC/FALLOCATE arrive without a handle and are
//     served from the node: reads from a read-only descriptor of exactly the
//     node's inode (opened by path, inode number verified, kept until FORGET,
//     at most 4,096 kept), writes from a write-only descriptor opened and
//     closed per request — a descriptor kept open for writing would make the
//     host refuse to execute the file (ETXTBSY) that the sandbox just built.
//     Before the daemon unlinks or renames over a name it keeps a read-write
//     descriptor of that inode, so a file the sandbox still has open (the
//     temporary-file idiom) stays readable, writable and stat-able; for a
//     symlink, FIFO, socket or device node it keeps an O_PATH descriptor.
//     Either keeps the inode, and so its number, allocated until FORGET:
//     the daemon reports host inode numbers, and gVisor gives a file whose
//     (device, inode number) it still holds for a deleted file that file's
//     inode, so a freed number reused at once made a new file look like the
//     deleted symlink inside the sandbox. runsc's
//     gofer opens and closes host files whenever its dentry cache churns, and
//     the long lifetimes cut the requests of a warm `git status` and of an
//     untar several-fold.
//   - Long lifetimes kept honest. Entries, negative entries and attributes
//     live 60 s (SETATTR replies too). Every host directory the kernel looks
//     up is watched with inotify (by an O_PATH descriptor of the resolved
//     directory). An event is checked against what the kernel was told, and
//     only a difference invalidates: for a name event, the inode the name holds
//     in the routed workspace now against the inode the kernel knows under it
//     (go-fuse's tree, or the outcome of the daemon's own change of that name
//     being replied); for a content or attribute event, size/mtime/ctime now
//     against those last sent to the kernel (every LOOKUP, GETATTR, SETATTR,
//     CREATE reply and every write through the daemon records them). A change
//     of the daemon's own still in progress is waited for (up to 5 ms). So the
//     sandbox's own changes cost no invalidation, and a host change is always
//     seen within milliseconds, including one right after the sandbox changed
//     the same name or file (ctimes are fine-grained once queried; a reply with
//     a changed mtime or size makes the kernel drop the cached data itself,
//     FUSE_AUTO_INVAL_DATA). The one window left is a host write landing
//     between the daemon's own write and its stat of the result (microseconds):
//     the sandbox's cached pages of that file may then miss the host write
//     until the file changes again. An event-queue overflow invalidates
//     everything known; if a watch cannot be added (per-user inotify limit) the
//     daemon falls back to 1 s lifetimes.
//   - Fewer round trips per change: FUSE_HANDLE_KILLPRIV (gVisor clears
//     setuid/setgid bits itself; without it the kernel re-reads attributes
//     before every chown, which runsc does for every file it creates), FLUSH
//     answered ENOSYS once, READDIRPLUS on (go-fuse answers it with a lookup per
//     entry). What is left per created file is what the kernel and runsc need:
//     two LOOKUPs (runsc's stat, then O_EXCL revalidation of the negative
//     entry), CREATE, SETATTR (owner), WRITE, SETATTR (times), GETATTR of the
//     parent directory. The writeback cache stays off (go-fuse v2.12 does not
//     offer it, and it would delay sandbox writes reaching the host).
//   - The floor. `make bench` also mounts go-fuse's own loopback filesystem
//     (every request passed straight to the host directory: no routing, no
//     watch, no gVisor) with the router's lifetimes and mount options, on the
//     host, and runs the same script through it (`fuse_floor_host_loopback`).
//     A FUSE round trip is two cross-process wake-ups, and a create is six to
//     seven of them. An untar is one sequence of synchronous calls, so inside
//     gVisor any FUSE daemon adds its round trips to the plain bind's own
//     time: the bench reports plain bind + (loopback − host) as a lower bound
//     for any go-fuse router, which is above the untar target (router ≤ 1.5×
//     plain bind) before the router does any work of its own
//     (docs/BENCHMARKS.md has the figures). The same loopback mount is
//     then bound into bare runsc in place of the workspace
//     (`fuse_loopback_bare_runsc`): a daemon that routes nothing, in the
//     same sandbox. It has been slower than the router for git status and
//     both untars (it keeps a file handle per open file, the router none),
//     so it is FUSE inside gVisor, not the router's own work, that keeps
//     the untars far from a plain bind. Kernel passthrough,
//     which would remove the round trips for data, needs CAP_SYS_ADMIN in the
//     initial user namespace; FUSE over io_uring (kernel ≥ 6.14, module
//     parameter `fuse.enable_uring`) is not supported by go-fuse.
//   - runsc gets `--dcache` (one sentry-wide dentry cache, a quarter of the
//     inherited hard RLIMIT_NOFILE, clamped to 1,000–65,536: each dentry may
//     hold up to three host descriptors, and 10,000 exhausted a 20,000 limit
//     during an untar).
//
// Paths no ignore rule can match skip the state-side lookup; setattr
// resolves its node once by descriptor.
//
// Ignored directories at bind speed (`pkg/ignoredbind`): the heavy writers
// among ignored paths do not go through the daemon at all. At generation
// start HC binds, at `/workspace/<rel>`, the Ignored Workspace State copy
// `<DomainRoot>/ignored-state/<rel>` of every ignored directory that has one
// (any depth: the sticky start scan's findings) and of every top-level
// literal directory pattern of the rules (`node_modules/`, `.venv/`,
// `target/`, `dist/`), creating a pattern's state directory when missing:
// the daemon then lists that state directory at the routed path, which is
// the bind's mount point, so nothing is created on the host. Not bound, and
// so still routed: `.git` and anything in it, a path overlapping a Git
// Sentry mount (editor configuration), a path whose parent is not a
// plain host directory (runsc would create the missing chain through the
// daemon, on the host), a directory beneath another bound one, and anything
// beyond 64 binds (logged). `ocispec.Check` accepts such a bind only from the
// path's own state directory under the Domain root, over the routed
// workspace; RS re-checks each source before runsc starts (openat2 beneath
// the Domain Root without symlinks or mount crossings, a directory owned by
// the developer or a guest id) and fails the start otherwise. When the
// session user is not root, RS gives a bound directory, and what the
// developer owns in it (earlier router writes), to the session user's guest
// ids, so the agent can write it; what any guest user writes there belongs
// to its subordinate id on the host while the generation runs, and RS gives
// all of it back to the developer when the sandbox is gone (after a crash,
// the next start does; package rs, "Bound ignored directories"), so
// Ignored Workspace State is the developer's whenever no generation runs.
// A bound directory cannot be removed or renamed inside
// (EBUSY), only its contents; a tool that deletes the directory itself
// (`rm -rf node_modules`) gets EBUSY for that last step.
//
// Teardown and faults: RS unmounts the routed workspace after `runsc delete`
// and stops the exact daemon through its pidfd (SIGTERM, then SIGKILL); HC
// proves the daemon absent (PidfsRecoveryMatch) and records the participant
// Clean before the sandbox. If the daemon dies, FUSE requests fail
// (`ENOTCONN`, no hang) and RS tears the generation down. If RS dies the
// daemon dies by its parent-death edge and the mount disappears with RS's
// mount namespace; bootstrap recovery cleans the participant. With
// `ignored_path_isolation = false` the daemon still serves `/workspace`,
// with no ignore rules (every Git-ignored path is the host's, both ways):
// a `.git` created where the host had none, nested repositories and absent
// editor configuration still go to Domain state, and the name policy and the
// configuration guard still hold. A plain bind cannot do that: nothing can
// be mounted over a name that does not exist without creating it on the
// host. The price is the FUSE round trips of the routed workspace for
// profiles that turned isolation off.
package gitroute
