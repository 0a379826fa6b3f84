package prepared

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The file-system steps of reclamation and of settling a prepare intent.
// Which of them run, and what the Storage Catalog records around each, is
// package preparedcatalog's: this package links no catalog, so that the
// Runtime Supervisor, which holds and validates trees, links no database.

// FileIdentity names an inode (a preparation lock's, in a prepare intent).
type FileIdentity struct{ Dev, Ino uint64 }

// Presence is what a probe of prepared/<id> found.
type Presence int

const (
	// TreeAbsent: no prepared/<id>.
	TreeAbsent Presence = iota + 1
	// TreeIdle: flock(LOCK_SH|LOCK_NB) succeeds, so no gc holds it
	// exclusively.
	TreeIdle
	// TreeExclusive: a live gc holds it exclusively.
	TreeExclusive
)

// StagingPath names staging tree name relative to prepared/, as gc
// reports it.
func StagingPath(name string) string { return stagingDir + "/" + name }

// StagingNames lists prepared/.staging.
func (st *Store) StagingNames() ([]string, error) { return dirNames(st.stagingFD) }

// ArtifactNames lists prepared/ without the store's own directories
// (.staging, .used, .trash, .locks): published artifacts and anything
// foreign, which the caller validates (ValidID, Lookup).
func (st *Store) ArtifactNames() ([]string, error) {
	names, err := dirNames(st.preparedFD)
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		switch n {
		case stagingDir, usedDir, trashDir, locksDir:
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// LastUsed is the last time a Runtime Supervisor held artifact id
// (prepared/.used/<id>'s mtime); ok is false when none did.
func (st *Store) LastUsed(id string) (t time.Time, ok bool) {
	var ust unix.Stat_t
	if unix.Fstatat(st.preparedFD, usedDir+"/"+id, &ust, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return time.Time{}, false
	}
	return time.Unix(ust.Mtim.Unix()), true
}

// TreeLock is flock(LOCK_EX) on a published tree: while it is held no
// Runtime Supervisor holds the tree (Hold) and none can begin to.
type TreeLock struct{ fd int }

// Release drops the lock.
func (l *TreeLock) Release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// LockExclusive takes flock(LOCK_EX|LOCK_NB) on prepared/<id>, gc's right
// to reclaim it. inUse reports a holder (a running Domain).
func (st *Store) LockExclusive(id string) (l *TreeLock, inUse bool, err error) {
	fd, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, true, nil
	}
	return &TreeLock{fd: fd}, false, nil
}

// MoveToTrash renames prepared/<id> (whose TreeLock the caller holds) to
// prepared/.trash/<dst>, syncs both directories and drops its usage time:
// reclamation's one visible step. moved reports whether the rename took
// place: a failed rename leaves the tree where it was, a failed sync after
// it does not.
func (st *Store) MoveToTrash(id, dst string) (moved bool, err error) {
	tfd, err := openOrCreateDir(st.preparedFD, trashDir, 0o700, true)
	if err != nil {
		return false, err
	}
	defer unix.Close(tfd)
	if err := unix.Renameat2(st.preparedFD, id, tfd, dst, unix.RENAME_NOREPLACE); err != nil {
		return false, fmt.Errorf("reclaim %s: %w", id, &os.PathError{Op: "renameat2", Path: dst, Err: err})
	}
	for _, fd := range []int{tfd, st.preparedFD} {
		if err := unix.Fsync(fd); err != nil {
			return true, fmt.Errorf("reclaim %s: fsync: %w", id, err)
		}
	}
	unix.Unlinkat(st.preparedFD, usedDir+"/"+id, 0)
	return true, nil
}

// Probe reports whether prepared/<id> is absent, idle or held
// exclusively by a live gc.
func (st *Store) Probe(id string) (Presence, error) {
	fd, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return TreeAbsent, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	for {
		err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return TreeIdle, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return TreeExclusive, nil
	}
	return 0, fmt.Errorf("flock %s: %w", id, err)
}

// ProbeIn is Probe for the Storage Root storageRoot, opening nothing it
// would create (no prepared/ at all: absent).
func ProbeIn(storageRoot, id string) (Presence, error) {
	if !ValidID(id) {
		return 0, fmt.Errorf("prepare: %q is not a prepared-artifact ID", id)
	}
	rootFD, err := unix.Open(storageRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: storageRoot, Err: err}
	}
	defer unix.Close(rootFD)
	pfd, err := openBeneath(rootFD, preparedDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return TreeAbsent, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(pfd)
	return (&Store{preparedFD: pfd}).Probe(id)
}

// QuarantineStaging renames staging tree name into prepared/.trash (as
// stg-<name>) and syncs both directories: a settled intent's tree leaves
// .staging before its intent is abandoned. It returns the quarantine
// name, or "" when there is no such staging tree.
func (st *Store) QuarantineStaging(name string) (string, error) {
	var sb unix.Stat_t
	if err := unix.Fstatat(st.stagingFD, name, &sb, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	tfd, err := openOrCreateDir(st.preparedFD, trashDir, 0o700, true)
	if err != nil {
		return "", err
	}
	defer unix.Close(tfd)
	q := quarantinePrefix + name
	if err := unix.Renameat2(st.stagingFD, name, tfd, q, unix.RENAME_NOREPLACE); err != nil && !errors.Is(err, unix.ENOENT) {
		return "", fmt.Errorf("quarantine staging tree %s: %w", name, &os.LinkError{Op: "renameat2", Old: name, New: q, Err: err})
	}
	for _, fd := range []int{tfd, st.stagingFD} {
		if err := unix.Fsync(fd); err != nil {
			return "", err
		}
	}
	return q, nil
}

// QuarantineName is the name QuarantineStaging gives staging tree name.
func QuarantineName(name string) string { return quarantinePrefix + name }

// RemoveQuarantined deletes prepared/.trash/<q> (the caller is namespace
// root of the user namespace). A missing trash is nothing to delete.
func (st *Store) RemoveQuarantined(q string) error {
	tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(tfd)
	return removeAllAt(tfd, q)
}
