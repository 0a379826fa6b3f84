package pidfs

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pidfdGetMntNamespace is PIDFD_GET_MNT_NAMESPACE = _IO(PIDFS_IOCTL_MAGIC 0xFF, 3).
const pidfdGetMntNamespace = 0xFF03

// ErrNoNamespaceID reports a kernel without NS_GET_MNTNS_ID (Linux < 6.8):
// a mount namespace is then known by its nsfs (dev, ino) only, which the
// kernel reuses for the next namespace once one is freed.
var ErrNoNamespaceID = errors.New("kernel has no NS_GET_MNTNS_ID: mount namespace identified by nsfs dev/ino only")

// MountNamespaceID returns the kernel's 64-bit ID of the mount namespace
// nsfs descriptor fd (NS_GET_MNTNS_ID). Unlike the nsfs inode, the ID is
// never reused while the system is up. A kernel without the ioctl yields
// ErrNoNamespaceID.
func MountNamespaceID(fd int) (uint64, error) {
	var id uint64
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.NS_GET_MNTNS_ID, uintptr(unsafe.Pointer(&id)))
	if e == unix.ENOTTY || e == unix.EINVAL {
		return 0, fmt.Errorf("%w (%v)", ErrNoNamespaceID, e)
	}
	if e != 0 {
		return 0, os.NewSyscallError("ioctl NS_GET_MNTNS_ID", e)
	}
	if id == 0 {
		return 0, fmt.Errorf("%w (the kernel answered ID 0)", ErrNoNamespaceID)
	}
	return id, nil
}

// mountNamespaceOfFD is the (dev, ino, id) of the mount namespace nsfs
// descriptor fd; id is 0 when the kernel has no NS_GET_MNTNS_ID.
func mountNamespaceOfFD(fd int) (dev, ino, id uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, 0, os.NewSyscallError("fstat mount namespace", err)
	}
	id, err = MountNamespaceID(fd)
	if errors.Is(err, ErrNoNamespaceID) {
		err = nil
	}
	return uint64(st.Dev), st.Ino, id, err
}

// MountNamespaceOfPath opens a mount namespace file such as
// /proc/self/ns/mnt and returns its nsfs (dev, ino) and its unique ID, all
// read through the same descriptor; id is 0 when the kernel has no
// NS_GET_MNTNS_ID.
func MountNamespaceOfPath(path string) (dev, ino, id uint64, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	dev, ino, id, err = mountNamespaceOfFD(fd)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return dev, ino, id, nil
}

// MountNamespace returns the (dev, ino, id) of the process's mount
// namespace, obtained through the exact pidfd (PIDFD_GET_MNT_NAMESPACE);
// id is 0 when the kernel has no NS_GET_MNTNS_ID.
func (h *Handle) MountNamespace() (dev, ino, id uint64, err error) {
	var nsfd int
	var ierr error
	cerr := h.rc.Control(func(fd uintptr) {
		r, _, e := unix.Syscall(unix.SYS_IOCTL, fd, pidfdGetMntNamespace, 0)
		nsfd, ierr = int(r), nil
		if e != 0 {
			ierr = e
		}
	})
	if cerr != nil {
		return 0, 0, 0, cerr
	}
	if ierr != nil {
		return 0, 0, 0, os.NewSyscallError("ioctl PIDFD_GET_MNT_NAMESPACE", ierr)
	}
	defer unix.Close(nsfd)
	return mountNamespaceOfFD(nsfd)
}
