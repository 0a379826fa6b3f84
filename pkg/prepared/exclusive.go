package prepared

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Exclusion holds flock(LOCK_EX) on every published artifact and every
// preparation lock of a Storage Root (LockAll); Release drops them.
type Exclusion struct {
	fds []int
	// Artifacts lists the published artifacts locked.
	Artifacts []string
}

// Release drops every lock (closing the descriptors; a nil Exclusion is
// fine).
func (x *Exclusion) Release() {
	if x == nil {
		return
	}
	for _, fd := range x.fds {
		unix.Close(fd)
	}
	x.fds = nil
}

// LockAll takes, without waiting, flock(LOCK_EX|LOCK_NB) on every
// published artifact directory prepared/<id> — what gc takes on one before
// reclaiming it, and what a Runtime Supervisor's usage hold (Hold,
// LOCK_SH) conflicts with — and on every preparation lock
// prepared/.locks/<id>, which a live preparer holds. While the Exclusion is
// held no running Domain exposes an artifact and no preparation is in
// progress, so the caller may move the whole prepared tree aside
// (`lazaret rm --all`). A held lock refuses (errdefs.ErrRefused) naming it;
// a Storage Root without prepared/ yields an empty Exclusion.
func LockAll(storageRoot string) (*Exclusion, error) {
	rootFD, err := unix.Open(storageRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return &Exclusion{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock prepared images: %w", &os.PathError{Op: "open", Path: storageRoot, Err: err})
	}
	defer unix.Close(rootFD)
	preparedFD, err := openOrCreateDir(rootFD, preparedDir, 0, false)
	if errors.Is(err, unix.ENOENT) {
		return &Exclusion{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock prepared images: %w", err)
	}
	defer unix.Close(preparedFD)
	x := &Exclusion{}
	fail := func(err error) (*Exclusion, error) {
		x.Release()
		return nil, err
	}
	names, err := dirNames(preparedFD)
	if err != nil {
		return fail(fmt.Errorf("lock prepared images: %w", err))
	}
	for _, n := range names {
		if !ValidID(n) {
			continue
		}
		fd, err := openBeneath(preparedFD, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // reclaimed meanwhile
		}
		if err != nil {
			return fail(fmt.Errorf("lock prepared image %s: %w", n, err))
		}
		x.fds = append(x.fds, fd)
		if held, err := tryExclusive(fd); err != nil {
			return fail(fmt.Errorf("lock prepared image %s: %w", n, err))
		} else if held {
			return fail(errdefs.New(errdefs.ErrRefused, "prepared image %s is in use by a running Domain (`lazaret status` lists them): end its sessions first", n))
		}
		x.Artifacts = append(x.Artifacts, n)
	}
	lfd, err := openBeneath(preparedFD, locksDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return x, nil
	}
	if err != nil {
		return fail(fmt.Errorf("lock preparations: %w", err))
	}
	defer unix.Close(lfd)
	locks, err := dirNames(lfd)
	if err != nil {
		return fail(fmt.Errorf("lock preparations: %w", err))
	}
	for _, n := range locks {
		fd, err := openBeneath(lfd, n, unix.O_RDWR|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("lock preparation %s: %w", n, err))
		}
		x.fds = append(x.fds, fd)
		if held, err := tryExclusive(fd); err != nil {
			return fail(fmt.Errorf("lock preparation %s: %w", n, err))
		} else if held {
			return fail(errdefs.New(errdefs.ErrRefused, "the image of prepared artifact %s is being prepared by a starting Domain: retry when it has started", n))
		}
	}
	return x, nil
}

// tryExclusive takes flock(LOCK_EX|LOCK_NB) on fd; held reports another
// holder.
func tryExclusive(fd int) (held bool, err error) {
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, &os.SyscallError{Syscall: "flock", Err: err}
	}
	return false, nil
}
