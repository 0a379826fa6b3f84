package prepared

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// unixMode converts an os.FileMode's permission and special bits.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	if m&os.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	return u
}

// EnsureMountPoints creates every MountPoint missing from the rootfs
// (owner 0:0, MountPoint.Mode) and replaces entries of the wrong type
// (symlinks, or a file where a directory belongs and vice versa) when that
// loses no content: an empty directory or a non-directory. Existing
// entries of the right type keep their image metadata.
func EnsureMountPoints(rootfsFD int) (created, replaced []string, err error) {
	for _, mp := range MountPoints {
		parentFD, base, err := openParent(rootfsFD, mp.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", mp.Path, err)
		}
		c, r, err := ensureOne(parentFD, base, mp)
		unix.Close(parentFD)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", mp.Path, err)
		}
		if c {
			created = append(created, mp.Path)
		}
		if r {
			replaced = append(replaced, mp.Path)
		}
	}
	return created, replaced, nil
}

// openParent opens the parent directory of p (absolute) beneath rootfsFD.
// Missing parents are an error: MountPoints lists parents first.
func openParent(rootfsFD int, p string) (int, string, error) {
	dir, base := path.Split(path.Clean(p))
	dir = strings.Trim(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := openBeneath(rootfsFD, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, "", fmt.Errorf("parent directory: %w", err)
	}
	return fd, base, nil
}

func ensureOne(parentFD int, base string, mp MountPoint) (created, replaced bool, err error) {
	var st unix.Stat_t
	err = unix.Fstatat(parentFD, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return true, false, create(parentFD, base, mp)
	case err != nil:
		return false, false, err
	}
	typ := st.Mode & unix.S_IFMT
	if (mp.Dir && typ == unix.S_IFDIR) || (!mp.Dir && typ == unix.S_IFREG) {
		return false, false, nil
	}
	// Wrong type. Remove it unless that would drop directory contents.
	if typ == unix.S_IFDIR {
		if err := unix.Unlinkat(parentFD, base, unix.AT_REMOVEDIR); err != nil {
			return false, false, fmt.Errorf("image has a directory where a file mount point belongs and it cannot be removed: %w", err)
		}
	} else if err := unix.Unlinkat(parentFD, base, 0); err != nil {
		return false, false, err
	}
	return false, true, create(parentFD, base, mp)
}

func create(parentFD int, base string, mp MountPoint) error {
	mode := unixMode(mp.Mode)
	if mp.Dir {
		if err := unix.Mkdirat(parentFD, base, 0o700); err != nil {
			return &os.PathError{Op: "mkdirat", Path: base, Err: err}
		}
		fd, err := openBeneath(parentFD, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Fchown(fd, 0, 0); err != nil {
			return err
		}
		return unix.Fchmod(fd, mode) // after chown, explicit: umask-independent
	}
	fd, err := unix.Openat(parentFD, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "openat", Path: base, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// checkMountPoints verifies that every mount point exists with its type,
// reached without symlinks.
func checkMountPoints(rootfsFD int) error {
	for _, mp := range MountPoints {
		rel := strings.TrimPrefix(path.Clean(mp.Path), "/")
		flags := unix.O_PATH | unix.O_NOFOLLOW
		if mp.Dir {
			flags |= unix.O_DIRECTORY
		}
		fd, err := openBeneath(rootfsFD, rel, flags, 0)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", mp.Path, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", mp.Path, err)
		}
		if !mp.Dir && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("mount point %s is not a regular file", mp.Path)
		}
	}
	return nil
}
