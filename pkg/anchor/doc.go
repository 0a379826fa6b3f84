// Package anchor implements State Anchors (spec §3.5, §3.8, FR-4, FR-11,
// DX-2, OR-5, SR-14): the persistent, Domain-scoped upper layers kept over
// the shared, read-only prepared lower.
//
// One kernel overlay (always with `userxattr`: without it the mount degrades
// and a later rm of a merged directory fails with EIO) is mounted per
// persistent guest path, in the Runtime Supervisor's private mount
// namespace, with
//
//	lowerdir = <the read-only bind of the prepared rootfs>/<guest path>
//	upperdir = <DomainRoot>/anchors/<name>/upper
//	workdir  = <DomainRoot>/anchors/<name>/work
//
// and handed to runsc as a bind mount at the guest path. The sandbox root
// stays the read-only lower with gVisor's ephemeral root overlay, so what is
// not under a persistent path is lost at exit. Files, directories and
// whiteouts in an upper stay authoritative when the image changes;
// everything else follows the current prepared lower.
//
// Layout beneath the Domain Root:
//
//	anchors/
//	  <name>/                 one State Anchor; <name> escapes the guest path
//	    anchor.json           versioned record (Record): guest path, artifact written over
//	    upper/                overlay upper (subordinate-uid files)
//	    work/                 overlay work directory
//	    upper.swap/           transient during a reset: the empty upper about
//	                          to be exchanged in, then the previous upper
//	  .trash/                 uppers and work dirs discarded by reset; deleted
//	                          inside the user namespace by the next Runtime
//	                          Supervisor (the host user cannot delete
//	                          subordinate-uid files)
//
// Every path is opened relative to a descriptor of the Domain Root with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV), so no
// symlink planted in the Domain Root or in the lower can lead a mount, a
// reset or an inspection outside it. Mount-side functions (Mount, Unmount,
// PurgeTrash) run as namespace root of the Domain's user namespace; List and
// Reset run on the host as the developer and only rename and create
// developer-owned directories.
//
// This package is a primitive package: it makes the raw mount, openat2,
// renameat2 and statx calls itself.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # State Anchors, reset and GC
//
// `pkg/anchor`. Every profile persists `config.DefaultPersistentPaths` (`/etc`,
// `/home`, `/opt`, `/root`, `/usr`, `/var/lib`: what `apt-get install`, `npm
// install -g`, `pip install --user` and hand-installed tools write) plus its
// `persistent_paths`; `/tmp`, `/run`, `/var/tmp`, `/var/cache`, `/var/log` and
// the rest of the root stay in gVisor's ephemeral root overlay.
//
//	HC: spec binds  <bundle>/anchors/<name> → /usr (rw), …, then the resolver files, volumes
//	RS (its own user+mount namespace, after binding the lower read-only at bundle/rootfs):
//	   PurgeTrash (finish interrupted resets, delete reset uppers as namespace root)
//	   for each anchor bind of the spec it is about to run:
//	     lower = openat2(bundle/rootfs, <path>, BENEATH|NO_SYMLINKS|NO_XDEV)  → /proc/self/fd/N
//	     mount -t overlay -o lowerdir=…,upperdir=<DomainRoot>/anchors/<name>/upper,
//	                         workdir=…/work,userxattr   <bundle>/anchors/<name>
//	     identity = (mount-ns inode, statx STATX_MNT_ID_UNIQUE, target, upper)
//	   teardown (also lease-loss): for each, newest first: the mount at target must
//	     be that identity (else left alone and logged) → umount → observe absence
//	     (the target shows another unique mount ID)
//
// In detail:
//
//   - Upper layout: `<DomainRoot>/anchors/<name>/{anchor.json,upper,work}`,
//     `<name>` the guest path escaped (`/var/lib` → `var%2Flib`); `anchor.json`
//     (versioned, newer refused) records the guest path and the prepared
//     artifact the upper was first written over. A new or reset upper takes
//     the lower directory's owner and mode. When the image now maps to another
//     artifact and the upper is not empty, RS says so (progress line on a
//     terminal) and `state list` marks it: unmodified files follow the new
//     image, the upper's files, directories and whiteouts stay authoritative.
//   - The sandbox cannot write the lower: the root is the read-only bind (under
//     gVisor's memory overlay), and each overlay's lower is that same read-only
//     bind (`TestSpec35StateAnchorsPersistDebian` checks the prepared tree).
//   - `lazaret state list|inspect|verify|reset` (`cmd/lazaret/cli/state.go`) resolve
//     the Domain from profile and workspace (stored identity checked), never
//     from a path. `inspect` walks the upper beneath descriptors with
//     `RESOLVE_NO_SYMLINKS` and classifies each entry against the current
//     prepared lower (added / modified / deleted = whiteout / opaque, sizes, no
//     contents); it runs as the host user and lists the subtrees only the user
//     namespace can read. `reset` takes the Domain lock (a Domain whose
//     coordinator answers is refused, a stopping one waited for), refuses while
//     any process's mountinfo shows an overlay over the Domain's anchors, shows
//     Domain and scope and asks unless `--yes`. Crash-consistent (OR-5):
//     `mkdir upper.swap` → `renameat2(upper.swap, upper, RENAME_EXCHANGE)` →
//     `renameat2(upper.swap, .trash/…, NOREPLACE)`; the active upper is always
//     the previous or a complete empty one, and a leftover `upper.swap` is moved
//     to the trash by the next reset or RS. The trash is deleted at once by
//     `lazaret state reset` through the state maintenance role (a full
//     filesystem would otherwise keep the space until a start it prevents),
//     or else by the next RS, inside the user namespace (the host user
//     cannot delete subordinate-uid files). The swap-and-trash mechanism, the confined opens and the trash
//     deletion live once in `pkg/statetree` (`SwapEmpty`, `FinishSwap`,
//     `Discard`, `Purge`); State Anchors and Ignored Workspace State both use
//     it, each with its own failpoint prefix (`lazaret:state-reset:<step>`,
//     `lazaret-rs:ignored-reset:<step>`).
//   - `lazaret state verify` (`cmd/lazaret/cli/state_verify.go`,
//     `pkg/statemaint`) takes the Domain lock like reset (refusing an active
//     Domain with its state, generation and session IDs from the coordinator's
//     status; no flag bypasses it) and the mount checks, then runs the hidden
//     role `__lazaret-state-maint --op=verify` of `lazaret-rs` through the CLI's broker
//     (`Acquire`: the launch barrier holds it until `newuidmap`/`newgidmap`
//     have written its map) in a new user namespace mapped `0 → you,
//     1..65533 and 65535..65537 → your 65536 subordinate ids`, leaving 65534
//     (the kernel's overflow id) unmapped so that a file of a foreign owner is
//     unambiguous. There, as namespace root, it walks every anchor with
//     `statetree.Checker` and prints a versioned JSON report: structure
//     (`anchor.json` valid and not newer, name ↔ guest path, `upper/` and
//     `work/` present, nothing else; `upper.swap` = interrupted reset), owners
//     (you or your subordinate ids), device nodes other than whiteouts (char
//     0/0), setuid/setgid files owned by your host user/group, regular files
//     with more links than the verified trees hold (a hard link to outside),
//     directories on another filesystem or symlinked where the layout wants a
//     directory (escape), and work directories that are not empty (the kernel's
//     shared whiteout `work/work/#<hex>` excepted). Symlinks inside the state
//     are counted as data and never followed: every directory is opened
//     beneath its parent with `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//     RESOLVE_NO_XDEV`. Findings exit 1 with what to do per anchor.
//   - Ignored Workspace State maintenance (`pkg/ignoredstate`,
//     `lazaret state ignored list|inspect|verify|reset`, kept apart from the
//     anchors' commands). `list` finds, in `<DomainRoot>/ignored-state`, the
//     topmost entries the routing decision of the next generation
//     (`gitroute.Routing`, built from the same inputs as the coordinator's:
//     ignore rules, Git Sentry hidden names, the profile's isolation) routes to
//     state, descending through "mirror" directories, with sizes; an entry the
//     rules no longer route is stale. `inspect` compares one with the host copy
//     at the same path (added / modified by type, size or mtime / deleted =
//     host-only ignored entries, which the sandbox does not see; no contents).
//     `reset PATH` is one `renameat2` of the entry into
//     `<DomainRoot>/ignored-state.trash` (crash: in place or wholly gone);
//     `reset --all` is `statetree.SwapEmpty` of `ignored-state` with
//     `ignored-state.swap`. Both run in the same user-namespace role
//     (`--op=ignored-reset`): a directory of a subordinate id can only be
//     moved to another parent (the trash) by namespace root; their failpoints
//     are `lazaret-rs:ignored-reset:<step>`. Both hold the Domain lock (in the CLI) and refuse while any
//     mountinfo shows the Domain's routed-workspace mount or an anchor
//     overlay. RS finishes an interrupted `--all` and deletes the trash, in the
//     user namespace, before mounting (`ignoredstate.PurgeTrash`).
//     `list` also shows the sticky paths (generation and date, whether the rules
//     still ignore them, tracked, has state); `release PATH` (Domain lock and
//     mount checks as reset, asks unless `--yes`) removes PATH and the sticky
//     paths below it from the record, saying whether the host copy becomes
//     visible from the next run; the state copy stays until `reset PATH`.
//     `reset` releases the sticky paths of its scope after the state is gone (a
//     crash in between leaves them sticky).
//   - Concurrent Domains preparing one image prepare it once: the preparer
//     takes `prepared/.locks/<id>` (flock) before writing its intent, and a
//     waiter that finds the artifact `Published` in the catalog when it gets the
//     lock reuses it (one preparation operation in the catalog:
//     `TestConcurrentPublishRace`, `TestSpec35PrepareOnceConcurrentDomains`).
//   - GC (`lazaret gc`, `pkg/prepare/gc.go`): RS holds `flock(LOCK_SH)` on its
//     prepared artifact's directory for its whole life (`prepared.Hold`, which
//     re-checks after locking that the directory is still the published one and
//     re-prepares otherwise) and touches `prepared/.used/<id>`. GC takes
//     `flock(LOCK_EX|LOCK_NB)` on each artifact; a held one is never touched; an
//     unheld one is reclaimed by policy (`--keep` most recently used, `--min-age`,
//     `--max-size` budget) with one rename into `prepared/.trash`, then deleted
//     in the user namespace by gc itself (lazaret-rs's state-maintenance role,
//     `statemaint.PurgePreparedTrash`) or, failing that, by the next RS (in the
//     background, cancelled at its exit so teardown never waits). A staging tree is touched only through its
//     durable prepare intent and only once `flock(LOCK_EX|LOCK_NB)` on the exact
//     lock inode the intent names succeeds (no live preparer, whatever its pid):
//     it is then quarantined into `.trash/stg-<name>` (or, if the tree was
//     already renamed into place, the intent is rolled forward to `Published`).
//     A staging tree with no intent, one whose lock is held or replaced, and any
//     entry that is not a valid artifact are never touched. Reclamation steps
//     `BeginReclaim` (Reclaiming + trash name, under `LOCK_EX` on the tree) →
//     rename → `RemoveArtifact`; `catalog.Tx.RecoverReclaim` settles an
//     interruption deterministically (tree gone → completed; tree present and
//     `LOCK_SH|LOCK_NB` succeeds → rolled back; held → a live gc finishes) and
//     runs in the next gc, the next preparer and HC's lease acquisition, so a gc
//     crash never blocks leases. Crash points `gc:{recovered,quarantined,
//     reclaiming,renamed,removed}` (`TestCrashAtEachGCStep`,
//     `TestOR7GCCrashRecovery`, `TestOR7GCReclaimsAbandonedPrepareThroughIntent`).
//   - Removal (`lazaret rm`, `cmd/lazaret/cli/rm.go`, `pkg/removal`): the
//     Domain's state, or with `--all` everything under the Storage Root, goes
//     in two steps, as the resets' trash does. (1) The CLI takes the Domain
//     lock and the mount checks of `state reset` (`lockForMaintenance`: an
//     active Domain is refused naming its sessions, no flag bypasses it),
//     refuses a Domain a crash left unrecovered (its runtime directory remains
//     or the Storage Catalog holds a lease of it: the records its recovery
//     needs are in the store rm would delete; `lazaret run` recovers it), shows
//     the scope and asks unless `--yes`, then moves the Domain Root into
//     `<Storage Root>/.trash/domain-<id>.<ns>` with one `renameat2(NOREPLACE)`
//     beneath validated descriptors (the Storage Root opened `O_NOFOLLOW` and
//     owner-checked, everything beneath it through `statetree.OpenBeneath`),
//     after checking that the directory moved holds the lock inode it locked.
//     `--all` locks every Domain, then, under `storage-catalog.lock`
//     (`catalog.Exclusive`) and `prepared.LockAll` (`LOCK_EX|LOCK_NB` on every
//     artifact and preparation lock: a Runtime Supervisor's `LOCK_SH` usage
//     hold or a live preparer refuses), moves each Domain Root and then every
//     other Storage Root entry (catalog, prepared, host, the lock file) with one
//     rename each. (2) The hidden role `__lazaret-state-maint --op=purge` of
//     lazaret-rs deletes the trash as namespace root of the same user
//     namespace `state verify` uses (package statemaint): the developer cannot
//     delete the subordinate-id files. A crash leaves each tree either
//     complete in place or wholly in the trash (failpoint
//     `lazaret:rm:moved`, `TestRmCrashConsistency`); the next `lazaret rm`, and
//     every Runtime Supervisor beside `prepared.PurgeTrash`, delete the trash.
//     `--all` finally removes the empty trash, the Storage Root and the empty
//     runtime root; `--images` moves `$XDG_DATA_HOME/lazaret/images` into
//     `$XDG_DATA_HOME/lazaret/.trash` and deletes it as the developer (the
//     files are the developer's own). A `lazaret run` that locked a lock file rm
//     moved aside sees that the file at the path is another (`lockedAtPath`)
//     and locks the new one, so an HC never runs on an unlinked lock.
//   - Leases (§3.5, FR-17, `pkg/hc/preparedlower`). RS holds the artifact, then
//     sends `ArtifactReady` and mounts nothing until HC answers `LeaseRecorded`,
//     which HC sends only after: `prepared_lower` = Intent{artifact,
//     lease_state=Intent} → the exact `(artifact, Domain, generation)` catalog
//     lease (`pkg/catalog`; in the same catalog operation HC settles an
//     interrupted reclamation and verifies the artifact against its preparer's
//     record — Published, manifest digest mapping to the ID and equal to RS's,
//     the tree's `artifact.json` agreeing — never trusting RS) →
//     `prepared_lower` = LeaseHeld →
//     `state_anchor` = Intent{artifact, RS mount namespace}. RS then binds the
//     lower, mounts the anchors and sends `AnchorsMounted` (namespace + each
//     overlay's unique mount ID, target, upper); HC records `state_anchor` =
//     Prepared with them. `state_anchor` has no daemon: a kernel overlay is
//     served by the kernel, so its `daemon` slot is optional (a recorded one
//     must still be Committed). Release: `state_anchor` = ReleaseIntent before
//     StopSandbox → RS verifies and unmounts each exact mount (IDs back in
//     `SupervisorStopped`) → once RS's mount namespace has no process and no
//     nsfs bind left (`pidfs.NamespaceHolders`: absence observed, not inferred
//     from RS's death) `state_anchor` Clean + `prepared_lower` ReleaseIntent in
//     one transaction → `catalog.ReleaseLease` rechecks both under
//     storage-catalog.lock → `prepared_lower` Clean. A coordinator lost: RS
//     unmounts and exits without opening either store; the next HC's bootstrap
//     recovery (`preparedlower.(*Service).Recover`, also for a generation whose sandbox is already
//     Clean) releases the lease only with the same proof, else retains and
//     reports it. `lazaret gc` consults the catalog: a leased artifact is kept;
//     reclamation moves its record to Reclaiming under the catalog lock before
//     the rename and removes it after. The usage flock above stays as a second,
//     physical guard.
//
// # Profile paths
//
// `pkg/profilestate`. State Anchors are per Domain; a profile's
// `profile_paths` (an agent's login directory, `~/.claude` for the
// built-in `claude`, `~/.codex` for `codex`) are per profile, shared by
// the Domains of every workspace:
//
//	<Storage Root>/profiles/<profile>/
//	  lock                          flock: LOCK_SH by each RS of the profile, LOCK_EX|LOCK_NB by a reset
//	  paths/<escaped guest path>/   the developer's, 0700 (the entry; escaped as anchor names)
//	    data/                       bound at the guest path; owned by the session user's guest ids
//
// In detail:
//
//   - Configuration (`pkg/config`): entries are absolute or `~/…` (the session
//     user's home, resolved after the layers are merged), directories only,
//     never `/workspace`, `/.lazaret`, the kernel file systems, a State Anchor
//     root or an ancestor of one, a volume target, nested or duplicated, at
//     most 16. They are fingerprinted (`profile_paths`, omitted when empty so
//     that older fingerprints are unchanged) and travel to HC in the canonical
//     profile.
//   - HC adds one bind per path to the spec (`ocispec.ProfilePath`:
//     `bind,rw,nosuid,nodev`, right after the State Anchors, so that a path
//     inside `/home` lands on the anchor) and names them in `StartSandbox`
//     (profile, paths, session uid/gid). `ocispec.Check` accepts a profile
//     path bind only from that layout, at a path outside Lazaret's mounts.
//   - RS, as namespace root, after the lease and before the root is mounted:
//     checks that the spec binds exactly those sources, takes the profile's
//     lock shared (held until the runsc sandbox and gofer are proven gone),
//     creates each missing `data` directory (mode 0700, `fchown` to the
//     session user's guest uid/gid, which is RS id = subordinate id) beneath
//     descriptors (`statetree.OpenBeneath`, no symlinks, no other filesystem)
//     and refuses an existing one that is not a plain directory. The mount
//     point comes from the image or the skeleton (`pkg/mountskel`); when the
//     image lacks the home, the skeleton makes `/home/agent` root-owned and
//     the guest init (`pkg/guestuser`) adopts a root-owned home: chown to the
//     user, mode 0750, `/etc/skel` entries where missing.
//   - Files, not supported: a bind-mounted file cannot be replaced by rename
//     (`EBUSY`), which is how programs save settings, and a created-empty file
//     is not valid JSON; the built-in `claude` profile sets
//     `CLAUDE_CONFIG_DIR=/home/agent/.claude`, where Claude Code also keeps
//     its `.claude.json`.
//   - `lazaret state list` lists configured and stored paths with sizes
//     (`statemaint --op=profile-sizes`, in the user namespace: the files are
//     the session user's). `state reset PATH | --profile-paths` takes the
//     profile's lock `LOCK_EX|LOCK_NB` (a sandbox of the profile in any
//     workspace refuses it), asks, moves each entry into `<Storage
//     Root>/.trash` with one `renameat2(NOREPLACE)` (the entry is the
//     developer's, so it can change parent; crash: in place or wholly in the
//     trash; failpoint `lazaret:profile-reset:moved`,
//     `TestSpec38ProfilePathResetCrashConsistency`), then deletes the trash in
//     the user namespace (`--op=purge`, also run by every RS and `lazaret rm`). `lazaret rm` of one Domain keeps
//     the profile's paths; `rm --all` moves `profiles/` with the other
//     Storage Root entries.
package anchor
