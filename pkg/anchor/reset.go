package anchor

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// Reset discards the upper of the State Anchor for guestPath so that the
// next launch follows the current prepared lower there (spec §3.8, OR-5).
// The caller must hold the Domain's exclusive lifecycle lock and have
// established that nothing uses the state (NotInUse).
//
// The steps (statetree.SwapEmpty, the mechanism Ignored Workspace State
// resets share), each a single rename or mkdir beneath the Domain Root:
//
//  1. finish an interrupted reset: move a leftover upper.swap to the trash;
//  2. mkdir upper.swap (empty);
//  3. renameat2(upper.swap, upper, RENAME_EXCHANGE): the active upper is now
//     the empty one, upper.swap the previous one;
//  4. renameat2(upper.swap, .trash/<name>.<n>.upper, RENAME_NOREPLACE).
//
// A crash at any point leaves upper either the previous upper or a complete
// empty one, never a partial one; step 1 (here or in the next Runtime
// Supervisor's PurgeTrash) finishes the rest. The trash is deleted inside the
// user namespace (PurgeTrash), since the host user cannot delete
// subordinate-uid files: by `lazaret state reset` itself through the state
// maintenance role, or else by the next Runtime Supervisor. It reports whether there was an anchor.
func Reset(domainRoot, guestPath string, now func() time.Time) (bool, error) {
	name, err := Name(guestPath)
	if err != nil {
		return false, err
	}
	afd, err := openAnchors(domainRoot, false)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(afd)
	fd, err := statetree.OpenDir(afd, name)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	tfd, err := statetree.MkdirBeneath(afd, trashDir, 0o700)
	if err != nil {
		return true, err
	}
	defer unix.Close(tfd)
	return true, statetree.SwapEmpty(upperSwap(fd, tfd, name, now))
}

// ResetFailpoint prefixes the failpoints of Reset's steps
// (statetree.SwapSteps).
const ResetFailpoint = "lazaret:state-reset:"

// upperSwap describes the reset of the upper of anchor directory fd.
func upperSwap(fd, tfd int, name string, now func() time.Time) statetree.Swap {
	return statetree.Swap{Dir: fd, Active: upperName, SwapName: swapName, TrashDir: tfd, Mode: 0o755, Fail: ResetFailpoint,
		TrashName: func() string { return name + "." + strconv.FormatInt(now().UnixNano(), 10) + ".upper" }}
}

// RecoverAll finishes every interrupted reset of the Domain Root (moves
// each upper.swap to the trash). Host side; idempotent.
func RecoverAll(domainRoot string, now func() time.Time) error {
	afd, names, err := readAnchors(domainRoot)
	if err != nil || afd < 0 {
		return err
	}
	defer unix.Close(afd)
	var tfd = -1
	defer func() {
		if tfd >= 0 {
			unix.Close(tfd)
		}
	}()
	for _, n := range names {
		if n == trashDir {
			continue
		}
		if _, err := GuestPath(n); err != nil {
			return err
		}
		fd, err := statetree.OpenDir(afd, n)
		if err != nil {
			return err
		}
		var finishErr error
		if _, err := openDirCheck(fd, swapName); err == nil {
			if tfd < 0 {
				if tfd, err = statetree.MkdirBeneath(afd, trashDir, 0o700); err != nil {
					unix.Close(fd)
					return err
				}
			}
			finishErr = statetree.FinishSwap(upperSwap(fd, tfd, n, now))
		}
		unix.Close(fd)
		if finishErr != nil {
			return finishErr
		}
	}
	return nil
}

// TrashEntries counts what waits in the trash (for `lazaret state list`).
func TrashEntries(domainRoot string) (int, error) {
	tfd, names, err := openTrash(domainRoot)
	if tfd < 0 || err != nil {
		return 0, err
	}
	unix.Close(tfd)
	return len(names), nil
}

// openTrash opens the Domain's anchor trash and lists it; tfd is -1 (and
// err nil) when there is no trash.
func openTrash(domainRoot string) (tfd int, names []string, err error) {
	afd, err := openAnchors(domainRoot, false)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil, nil
	}
	if err != nil {
		return -1, nil, err
	}
	defer unix.Close(afd)
	tfd, err = statetree.OpenDir(afd, trashDir)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil, nil
	}
	if err != nil {
		return -1, nil, err
	}
	if names, err = statetree.ReadNames(tfd); err != nil {
		unix.Close(tfd)
		return -1, nil, err
	}
	return tfd, names, nil
}

// PurgeTrash deletes everything in the trash. It runs as namespace root in
// the Domain's user namespace (the Runtime Supervisor, before it mounts),
// where subordinate-uid files can be removed. The walk never follows a
// symlink: each directory is opened beneath its parent's descriptor.
func PurgeTrash(domainRoot string, now func() time.Time) (int, error) {
	if err := RecoverAll(domainRoot, now); err != nil {
		return 0, err
	}
	tfd, _, err := openTrash(domainRoot)
	if tfd < 0 || err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	return statetree.Purge(tfd)
}
