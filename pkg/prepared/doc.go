// Package prepared is the image-free side of the prepared lower (spec §3.5,
// FR-22, SR-15, OR-7): the prepared-artifact ID, the artifact record
// (artifact.json) and its validation, the Storage Root's prepared/ tree and
// the locks on it — usage holds (Hold), the trash (PurgeTrash,
// TrashEntries), the whole-store exclusion of `lazaret rm --all` (LockAll),
// the file-system steps of gc's reclamation and of settling a prepare
// intent (LockExclusive, MoveToTrash, QuarantineStaging, Probe) — and the
// store primitives the preparer builds on (Store: staging, publication,
// preparation locks). What the Storage Catalog records around those steps
// is package preparedcatalog's.
//
// It links no image library and no database: the Host Coordinator, the
// Runtime Supervisor (its lookup, LookupDigest, and its hold), the CLI's
// gc, state and rm paths and the state-maintenance role read and lock
// prepared lowers through it without initialising go.podman.io/image,
// go.podman.io/storage or pebble.
// Package prepare resolves images and applies their layers (lazaret-cli's
// preparer role, PreparerArg, which RS runs as its child) and uses this
// package for everything on disk.
//
// Layout beneath the Storage Root (formats unchanged by the split; see
// package prepare for how a tree is prepared):
//
//	prepared/
//	  .locks/<id>        preparation lock (its inode is in the prepare intent)
//	  .staging/<name>/   one preparation in progress, named by its intent
//	  .used/<id>         mtime = last time a Runtime Supervisor held the artifact
//	  .trash/            reclaimed trees (<id>.<n>) and quarantined staging (stg-<name>)
//	  pl-<32 hex>/       a published artifact, never modified again
//	    rootfs/
//	    artifact.json    versioned record (Record)
//
// The prepared-artifact ID is "pl-" followed by the first 32 hex digits of
// SHA-256 over the preparer format version and the image's manifest
// digest. All lookups use openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
// relative to descriptors of the Storage Root.
package prepared
