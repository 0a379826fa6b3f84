package anchor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
)

// Reset discards the upper of the State Anchor for guestPath so that the
// next launch follows the current prepared lower there (spec §3.8, OR-5).
// The caller must hold the Domain's exclusive lifecycle lock and have
// established that nothing uses the state (NotInUse).
//
// The steps, each a single rename or mkdir beneath the Domain Root:
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
// user namespace by the next Runtime Supervisor, since the host user cannot
// delete subordinate-uid files. It reports whether there was an anchor.
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
	fd, err := openDir(afd, name)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	tfd, err := mkdirBeneath(afd, trashDir, 0o700)
	if err != nil {
		return true, err
	}
	defer unix.Close(tfd)
	if err := finishSwap(fd, tfd, name, now); err != nil {
		return true, err
	}
	failpoint.Hit("lazaret:state-reset:swap-recovered")
	if err := unix.Mkdirat(fd, swapName, 0o755); err != nil {
		return true, &os.PathError{Op: "mkdirat", Path: swapName, Err: err}
	}
	if err := unix.Fsync(fd); err != nil {
		return true, err
	}
	failpoint.Hit("lazaret:state-reset:empty-created")
	if _, err := openDirCheck(fd, upperName); errors.Is(err, unix.ENOENT) {
		// Never mounted yet: the empty directory simply becomes the upper.
		if err := unix.Renameat2(fd, swapName, fd, upperName, unix.RENAME_NOREPLACE); err != nil {
			return true, &os.PathError{Op: "renameat2", Path: upperName, Err: err}
		}
		return true, unix.Fsync(fd)
	}
	if err := unix.Renameat2(fd, swapName, fd, upperName, unix.RENAME_EXCHANGE); err != nil {
		return true, &os.PathError{Op: "renameat2 exchange", Path: upperName, Err: err}
	}
	if err := unix.Fsync(fd); err != nil {
		return true, err
	}
	failpoint.Hit("lazaret:state-reset:exchanged")
	if err := finishSwap(fd, tfd, name, now); err != nil {
		return true, err
	}
	failpoint.Hit("lazaret:state-reset:trashed")
	return true, nil
}

// finishSwap moves a present upper.swap of anchor directory fd into the
// trash. Whatever it holds (an empty directory not yet exchanged, or the
// previous upper), the active upper is complete.
func finishSwap(fd, tfd int, name string, now func() time.Time) error {
	if _, err := openDirCheck(fd, swapName); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	dst := name + "." + strconv.FormatInt(now().UnixNano(), 10) + ".upper"
	if err := unix.Renameat2(fd, swapName, tfd, dst, unix.RENAME_NOREPLACE); err != nil {
		return &os.PathError{Op: "renameat2 to trash", Path: dst, Err: err}
	}
	if err := unix.Fsync(tfd); err != nil {
		return err
	}
	return unix.Fsync(fd)
}

// RecoverAll finishes every interrupted reset of the Domain Root (moves
// each upper.swap to the trash). Host side; idempotent.
func RecoverAll(domainRoot string, now func() time.Time) error {
	afd, err := openAnchors(domainRoot, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(afd)
	names, err := readNames(afd)
	if err != nil {
		return err
	}
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
		fd, err := openDir(afd, n)
		if err != nil {
			return err
		}
		if _, err := openDirCheck(fd, swapName); err == nil {
			if tfd < 0 {
				if tfd, err = mkdirBeneath(afd, trashDir, 0o700); err != nil {
					unix.Close(fd)
					return err
				}
			}
			err = finishSwap(fd, tfd, n, now)
		}
		unix.Close(fd)
		if err != nil {
			return err
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
	tfd, err = openDir(afd, trashDir)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil, nil
	}
	if err != nil {
		return -1, nil, err
	}
	if names, err = readNames(tfd); err != nil {
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
	tfd, names, err := openTrash(domainRoot)
	if tfd < 0 || err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	for _, n := range names {
		if err := removeAllAt(tfd, n, 0); err != nil {
			return 0, fmt.Errorf("delete trash entry %s: %w", n, err)
		}
	}
	return len(names), unix.Fsync(tfd)
}

const maxDepth = 4096

// removeAllAt removes name (a file or a directory tree) beneath dirfd.
func removeAllAt(dirfd int, name string, depth int) error {
	if depth > maxDepth {
		return errdefs.New(errdefs.ErrRefused, "directory nesting deeper than %d", maxDepth)
	}
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	// An upper's directories may be mode 0 or owned by another mapped id:
	// namespace root may change them.
	unix.Fchmod(fd, 0o700)
	children, err := readNames(fd)
	if err != nil {
		unix.Close(fd)
		return err
	}
	for _, c := range children {
		if err := removeAllAt(fd, c, depth+1); err != nil {
			unix.Close(fd)
			return err
		}
	}
	unix.Close(fd)
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}
