package prepared

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Prepared artifacts are shared by every Domain of the user and reclaimed by
// `lazaret gc` (OR-7). The safety rule is physical and independent of any
// process being alive or dead: a Runtime Supervisor that exposes an artifact
// holds flock(LOCK_SH) on the artifact's directory for its whole life (Hold);
// GC reclaims an artifact only while it holds flock(LOCK_EX|LOCK_NB) on it,
// and reclaiming is one rename of prepared/<id> into prepared/.trash (so a
// half-deleted tree is never visible as an artifact). A holder re-checks,
// after locking, that the directory it locked is still prepared/<id>.
// Deleting the trash (subordinate-uid files) happens inside the user
// namespace (PurgeTrash): by `lazaret gc` itself, through lazaret-rs's
// state-maintenance role, and by every Runtime Supervisor in the background
// (cancelled at its exit; what is left waits for the next one).
//
//	prepared/
//	  .used/<id>      mtime = last time a Runtime Supervisor held the artifact
//	  .trash/<id>.<n> reclaimed trees waiting for deletion
const (
	usedDir  = ".used"
	trashDir = ".trash"
)

// ErrGone marks an artifact that disappeared (reclaimed) before it could be
// held; the caller prepares it again.
var ErrGone = errors.New("prepared artifact was reclaimed")

// Use is a usage hold on a published artifact; Release ends it (exiting
// does too: the kernel drops the lock with the last descriptor).
type Use struct{ fd int }

// Release drops the hold.
func (u *Use) Release() {
	if u != nil && u.fd >= 0 {
		unix.Close(u.fd)
		u.fd = -1
	}
}

// Hold takes a shared usage lock on artifact id. It returns ErrGone when the
// artifact is no longer published (reclaimed since it was looked up).
func Hold(storageRoot, id string) (*Use, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("prepare: %q is not a prepared-artifact ID", id)
	}
	st, err := OpenStore(storageRoot, false)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	defer st.Close()
	fd, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("hold %s: %w", id, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_SH)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hold %s: flock: %w", id, err)
	}
	// The directory locked must still be the published one.
	again, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hold %s: %w", id, ErrGone)
	}
	var a, b unix.Stat_t
	unix.Fstat(fd, &a)
	unix.Fstat(again, &b)
	unix.Close(again)
	if a.Dev != b.Dev || a.Ino != b.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("hold %s: %w", id, ErrGone)
	}
	if ufd, err := openOrCreateDir(st.preparedFD, usedDir, 0o700, true); err == nil {
		if f, err := openBeneath(ufd, id, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW, 0o600); err == nil {
			unix.Close(f)
		}
		unix.UtimesNanoAt(ufd, id, nil, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(ufd)
	}
	return &Use{fd: fd}, nil
}

// TrashEntries counts the entries of storageRoot's prepared trash: what gc
// reclaimed and a settled prepare intent quarantined, waiting for
// PurgeTrash. A missing Storage Root or trash counts none.
func TrashEntries(storageRoot string) (int, error) {
	st, err := OpenStore(storageRoot, false)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer st.Close()
	return st.TrashCount()
}

// TrashCount counts the entries of prepared/.trash (none when it is
// missing).
func (st *Store) TrashCount() (int, error) {
	tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, nil
	}
	defer unix.Close(tfd)
	n, err := dirNames(tfd)
	return len(n), err
}

// PurgeTrash deletes reclaimed trees and returns how many it deleted. It
// must run as namespace root of the user's full-map user namespace (the
// Runtime Supervisor, or the state-maintenance role `lazaret gc` runs),
// where the subordinate-uid files can be removed. It stops before the next
// directory entry once ctx is done and returns ctx's error (wrapped): what
// it deleted stays deleted, the rest stays in the trash for the next call.
// Two concurrent calls may delete one trash.
func PurgeTrash(ctx context.Context, storageRoot string) (int, error) {
	st, err := OpenStore(storageRoot, false)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer st.Close()
	tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	names, err := dirNames(tfd)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, n := range names {
		if !strings.HasPrefix(n, idPrefix) && !isQuarantine(n) {
			continue // only what gc or a prepare intent put there
		}
		if err := removeAllAtCtx(ctx, tfd, n); err != nil {
			return deleted, fmt.Errorf("delete reclaimed %s: %w", n, err)
		}
		deleted++
	}
	return deleted, nil
}

func dirNames(dirfd int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil { // a dup shares the offset
		return nil, err
	}
	return f.Readdirnames(-1)
}

// locksDir holds one preparation lock file per artifact ID (never cleaned
// by the staging cleanup, so a waiter and a holder always share an inode).
const locksDir = ".locks"

// LockPreparation takes the exclusive preparation lock of artifact id,
// waiting (bounded by ctx) while another process prepares it.
func (st *Store) LockPreparation(ctx context.Context, id string) (*PrepLock, error) {
	lfd, err := openOrCreateDir(st.preparedFD, locksDir, 0o700, true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(lfd)
	fd, err := openBeneath(lfd, id, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		unix.Close(fd)
		return nil, err
	}
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &PrepLock{fd: fd, ID: FileIdentity{Dev: uint64(sb.Dev), Ino: sb.Ino}}, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			unix.Close(fd)
			return nil, fmt.Errorf("preparation lock %s: %w", id, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			unix.Close(fd)
			return nil, fmt.Errorf("waiting for a concurrent preparation of %s: %w", id, ctx.Err())
		case <-t.C:
		}
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}
