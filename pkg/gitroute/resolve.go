package gitroute

import (
	"os"

	"golang.org/x/sys/unix"
)

// resolveFlags confine every lookup the router makes below a backend root:
// no ".." above the root, no symlink in any component (the sandbox can swap
// any component for a symlink at any moment), no magic links.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens rel (slash-separated, relative; "" is the root itself)
// below the directory root with openat2. O_NOFOLLOW and O_CLOEXEC are
// always added: a final symlink is opened as itself (with O_PATH) or
// refused with ELOOP, never followed.
func openBeneath(root int, rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolveFlags}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
		}
		return fd, nil
	}
}

// errno extracts the errno of an error from this package's primitives.
func errno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	for {
		switch e := err.(type) {
		case unix.Errno:
			return e
		case *os.PathError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		default:
			return unix.EIO
		}
	}
}

// ignoreEINTR retries a syscall interrupted by a signal.
func ignoreEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
