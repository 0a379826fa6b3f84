package mountns

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// ErrTargetNotFile: the mount point asked for cannot be resolved beneath
// its directory on the directory's own mount (it leaves the directory, a
// directory on its way is missing or a symlink, another mount is there).
// Nothing is mounted.
var ErrTargetNotFile = errors.New("mount point is not a file beneath its directory")

// ErrTargetIsDir: a directory stands where the file's mount point goes.
// Nothing is mounted; MoveAside moves it out of the way.
var ErrTargetIsDir = errors.New("a directory is where the file's mount point goes")

// FileBind is a bind of one file that BindFileBeneath made: its mount point
// (Rel beneath Dir) and the unique ID of the mount, so UnbindFile removes
// exactly it.
type FileBind struct {
	Dir, Rel string
	MountID  uint64
}

// BindFileBeneath binds the regular file src over the file rel beneath dir,
// read-only when readOnly, and returns the bind's identity.
//
// The mount point's directory is resolved beneath dir without following a
// symlink, without leaving dir's mount and without magic links (openat2):
// its content may be the sandbox's own (a State Anchor's), so nothing
// placed there can redirect the bind. The mount point itself must be a
// regular file: a missing one is created empty (as runsc creates a bind's
// mount point), and a symlink or any other non-directory is replaced by
// one (what it said is covered by the bind anyway, and following it is
// never safe); a directory is ErrTargetIsDir. The bind is assembled
// detached (open_tree, mount_setattr) and attached to the opened mount
// point by descriptor (move_mount), so it is read-only from its first
// instant and lands on exactly the file checked. src is the caller's own
// file (not followed if a symlink).
//
// Preconditions: namespace root in a private mount namespace.
func BindFileBeneath(src, dir, rel string, readOnly bool) (FileBind, error) {
	var sst unix.Stat_t
	if err := unix.Lstat(src, &sst); err != nil {
		return FileBind{}, &os.PathError{Op: "stat bind source", Path: src, Err: err}
	}
	if sst.Mode&unix.S_IFMT != unix.S_IFREG {
		return FileBind{}, fmt.Errorf("bind source %s is not a regular file", src)
	}
	pfd, base, err := openParentBeneath(dir, rel)
	if err != nil {
		return FileBind{}, err
	}
	defer unix.Close(pfd)
	var tst unix.Stat_t
	err = unix.Fstatat(pfd, base, &tst, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return FileBind{}, &os.PathError{Op: "stat mount point", Path: rel, Err: err}
	case tst.Mode&unix.S_IFMT == unix.S_IFDIR:
		return FileBind{}, fmt.Errorf("%w: %s beneath %s", ErrTargetIsDir, rel, dir)
	case tst.Mode&unix.S_IFMT != unix.S_IFREG:
		if err := unix.Unlinkat(pfd, base, 0); err != nil {
			return FileBind{}, &os.PathError{Op: "replace mount point", Path: rel, Err: err}
		}
		err = unix.ENOENT
	}
	if err != nil { // missing: create it empty
		fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return FileBind{}, &os.PathError{Op: "create mount point", Path: rel, Err: err}
		}
		unix.Close(fd)
	}
	tfd, err := statetree.OpenBeneath(pfd, base, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return FileBind{}, fmt.Errorf("%w: %s beneath %s: %v", ErrTargetNotFile, rel, dir, err)
	}
	defer unix.Close(tfd)
	if err := unix.Fstat(tfd, &tst); err != nil {
		return FileBind{}, &os.PathError{Op: "stat mount point", Path: rel, Err: err}
	}
	if tst.Mode&unix.S_IFMT != unix.S_IFREG {
		return FileBind{}, fmt.Errorf("%w: %s beneath %s has mode %#o", ErrTargetNotFile, rel, dir, tst.Mode&unix.S_IFMT)
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return FileBind{}, &os.PathError{Op: "open_tree", Path: src, Err: err}
	}
	defer unix.Close(tree)
	if readOnly {
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return FileBind{}, &os.PathError{Op: "mount_setattr ro", Path: src, Err: err}
		}
	}
	if err := unix.MoveMount(tree, "", tfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return FileBind{}, &os.PathError{Op: "move_mount", Path: rel, Err: err}
	}
	id, err := MountID(pfd, base)
	if err != nil {
		return FileBind{}, err
	}
	return FileBind{Dir: dir, Rel: rel, MountID: id}, nil
}

// MoveAside renames rel beneath dir (resolved as BindFileBeneath resolves
// it) to the first free name rel.lazaret-moved, rel.lazaret-moved-2, … in
// the same directory, and returns the new name (relative to dir).
func MoveAside(dir, rel string) (string, error) {
	pfd, base, err := openParentBeneath(dir, rel)
	if err != nil {
		return "", err
	}
	defer unix.Close(pfd)
	for i := 1; i <= 100; i++ {
		to := base + ".lazaret-moved"
		if i > 1 {
			to += "-" + strconv.Itoa(i)
		}
		err := unix.Renameat2(pfd, base, pfd, to, unix.RENAME_NOREPLACE)
		if err == nil {
			return path.Join(path.Dir(rel), to), nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", &os.PathError{Op: "move aside", Path: rel, Err: err}
		}
	}
	return "", fmt.Errorf("move aside %s beneath %s: no free name", rel, dir)
}

// openParentBeneath opens (O_PATH) the directory of rel beneath dir,
// without symlinks, magic links or leaving dir's mount, and returns it
// with rel's last component. rel must be clean, relative and inside dir.
func openParentBeneath(dir, rel string) (int, string, error) {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") || rel == "." {
		return -1, "", fmt.Errorf("%w: %q is not a clean relative path inside %s", ErrTargetNotFile, rel, dir)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", &os.PathError{Op: "open mount point directory", Path: dir, Err: err}
	}
	d := path.Dir(rel)
	if d == "." {
		return dfd, rel, nil
	}
	defer unix.Close(dfd)
	pfd, err := statetree.OpenBeneath(dfd, d, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, "", fmt.Errorf("%w: %s beneath %s: %v", ErrTargetNotFile, d, dir, err)
	}
	return pfd, path.Base(rel), nil
}

// UnbindFile detaches the bind b if it is still the mount at its mount
// point. It reports whether it did: a bind that is no longer there (the
// sandbox removed or renamed the file it covered, which detaches it) or a
// different mount in its place is left alone, as the namespace's end
// removes whatever remains.
func UnbindFile(b FileBind) (bool, error) {
	dfd, err := unix.Open(b.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open mount point directory", Path: b.Dir, Err: err}
	}
	defer unix.Close(dfd)
	// The bind crossed dir's mount: resolve without RESOLVE_NO_XDEV, still
	// without symlinks and beneath dir.
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	tfd, err := unix.Openat2(dfd, b.Rel, how)
	if err != nil {
		return false, nil
	}
	defer unix.Close(tfd)
	id, err := MountID(tfd, "")
	if err != nil || id != b.MountID {
		return false, err
	}
	if err := unix.Unmount("/proc/self/fd/"+strconv.Itoa(tfd), unix.MNT_DETACH); err != nil {
		return false, &os.PathError{Op: "unmount", Path: b.Rel, Err: err}
	}
	return true, nil
}

// MountID is the unique ID (statx STATX_MNT_ID_UNIQUE, never reused while
// the system runs) of the mount that name beneath dirfd is on, without
// following a final symlink; name "" is dirfd itself.
func MountID(dirfd int, name string) (uint64, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	what := name
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
		what = "descriptor " + strconv.Itoa(dirfd)
	}
	var stx unix.Statx_t
	if err := unix.Statx(dirfd, name, flags, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return 0, &os.PathError{Op: "statx", Path: what, Err: err}
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, errdefs.New(errdefs.ErrUnsupportedHost, "statx did not return STATX_MNT_ID_UNIQUE for %s: Linux 6.8 or newer is required", what)
	}
	return stx.Mnt_id, nil
}
