// Package mountns holds the mount primitives the Runtime Supervisor uses in
// its private mount namespace. Everything mounted there disappears with the
// namespace, so the host never sees a Lazaret mount of the sandbox root.
//
// Preconditions: the caller is ns-root in its own user+mount namespace.
package mountns

import (
	"os"

	"golang.org/x/sys/unix"
)

// MakePrivate makes every mount in this namespace private (recursively), so
// nothing mounted here propagates back to the host.
func MakePrivate() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return &os.PathError{Op: "make-rprivate", Path: "/", Err: err}
	}
	return nil
}

// BindReadOnly binds src at dst and remounts the bind read-only, so the
// prepared lower cannot be written through dst (spec §3.5).
func BindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return &os.PathError{Op: "bind", Path: dst, Err: err}
	}
	// A bind remount may not clear locked flags (nosuid, nodev…) inherited
	// from the source mount; keep whatever the source has and add ro.
	var st unix.Statfs_t
	flags := uintptr(0)
	if err := unix.Statfs(dst, &st); err == nil {
		flags = uintptr(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_NOATIME | unix.ST_NODIRATIME | unix.ST_RELATIME)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		unix.Unmount(dst, unix.MNT_DETACH)
		return &os.PathError{Op: "remount ro", Path: dst, Err: err}
	}
	return nil
}

// Unmount detaches the mount at dst.
func Unmount(dst string) error {
	if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
		return &os.PathError{Op: "unmount", Path: dst, Err: err}
	}
	return nil
}

// EnterPrivateWithFile gives the calling OS thread a new mount namespace in
// which src is bound over dst (read-only), e.g. a chosen resolv.conf for a
// process that is exec'd from this thread next. The caller must have locked
// the thread (runtime.LockOSThread) and hold CAP_SYS_ADMIN in the user
// namespace it is in; nothing propagates back.
func EnterPrivateWithFile(src, dst string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return &os.PathError{Op: "unshare mount namespace", Path: dst, Err: err}
	}
	if err := MakePrivate(); err != nil {
		return err
	}
	return BindReadOnly(src, dst)
}
