// Package treecopy copies one entry (a file, a symlink or a directory tree)
// between two directories opened by descriptor, for `lazaret state ignored
// cp` and `import`: a symlink is copied as a symlink and never followed, no
// entry is opened by a path that could lead out of its directory (openat
// with O_NOFOLLOW beneath the parent's descriptor), permission bits are
// kept (setuid and setgid dropped) and modification times too, while the
// copies belong to the process that makes them. Devices, FIFOs and sockets
// are skipped and counted.
//
// The copy is built under a temporary name in the destination directory
// and renamed into place only when complete (RENAME_NOREPLACE, or
// RENAME_EXCHANGE with an existing entry when replacing, whose old version
// is then deleted): an interruption leaves the destination as it was plus
// at most a temporary entry named .NAME.lazaret-tmp-*, never half a copy.
package treecopy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
)

// Stats counts what a copy made.
type Stats struct {
	Files    int64 `json:"files"`
	Dirs     int64 `json:"dirs"`
	Symlinks int64 `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
	// Skipped counts devices, FIFOs and sockets (not copied).
	Skipped int64 `json:"skipped"`
	// Replaced: an existing destination was replaced (Force).
	Replaced bool `json:"replaced"`
}

// ErrExists marks a destination that exists when Force is not set.
var ErrExists = errors.New("destination exists")

// TempPrefix starts the name of an unfinished copy: "." + name + TempPrefix.
const TempPrefix = ".lazaret-tmp-"

// Failpoint is hit after the copy is complete under its temporary name and
// before it is renamed into place.
const Failpoint = "treecopy:before-rename"

// maxDepth bounds the tree.
const maxDepth = 4096

// Copy copies the entry srcName of the directory srcDir to dstName in the
// directory dstDir. An existing dstName is refused (ErrExists, category
// refused) unless force, which replaces it as a whole.
func Copy(srcDir int, srcName string, dstDir int, dstName string, force bool) (Stats, error) {
	var st Stats
	if err := checkName(srcName); err != nil {
		return st, err
	}
	if err := checkName(dstName); err != nil {
		return st, err
	}
	var sst unix.Stat_t
	if err := unix.Fstatat(srcDir, srcName, &sst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "stat", Path: srcName, Err: err}
	}
	exists := false
	var dst unix.Stat_t
	if err := unix.Fstatat(dstDir, dstName, &dst, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		exists = true
		if !force {
			return st, errdefs.Mark(fmt.Errorf("%s: %w (--force replaces it)", dstName, ErrExists), errdefs.ErrRefused)
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return st, &os.PathError{Op: "stat", Path: dstName, Err: err}
	}
	tmp, err := tempName(dstName)
	if err != nil {
		return st, err
	}
	if err := copyEntry(srcDir, srcName, dstDir, tmp, &st, 0); err != nil {
		removeAll(dstDir, tmp)
		return st, err
	}
	failpoint.Hit(Failpoint)
	if exists {
		if err := unix.Renameat2(dstDir, tmp, dstDir, dstName, unix.RENAME_EXCHANGE); err != nil {
			removeAll(dstDir, tmp)
			return st, &os.PathError{Op: "rename", Path: dstName, Err: err}
		}
		st.Replaced = true
		removeAll(dstDir, tmp) // the old version, now under the temporary name
	} else if err := unix.Renameat2(dstDir, tmp, dstDir, dstName, unix.RENAME_NOREPLACE); err != nil {
		removeAll(dstDir, tmp)
		if errors.Is(err, unix.EEXIST) {
			return st, errdefs.Mark(fmt.Errorf("%s: %w (created meanwhile; --force replaces it)", dstName, ErrExists), errdefs.ErrRefused)
		}
		return st, &os.PathError{Op: "rename", Path: dstName, Err: err}
	}
	return st, unix.Fsync(dstDir)
}

// checkName refuses anything but one path component.
func checkName(n string) error {
	if n == "" || n == "." || n == ".." || strings.Contains(n, "/") {
		return errdefs.New(errdefs.ErrInvalid, "%q is not a file name", n)
	}
	return nil
}

func tempName(name string) (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "." + name + TempPrefix + hex.EncodeToString(b), nil
}

// perm is the mode kept on a copy: permission and sticky bits, never
// setuid or setgid.
func perm(mode uint32) uint32 { return mode & (0o777 | unix.S_ISVTX) }

func copyEntry(sd int, sn string, dd int, dn string, st *Stats, depth int) error {
	if depth > maxDepth {
		return errdefs.New(errdefs.ErrRefused, "%s: the tree is deeper than %d levels", sn, maxDepth)
	}
	var s unix.Stat_t
	if err := unix.Fstatat(sd, sn, &s, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "stat", Path: sn, Err: err}
	}
	times := []unix.Timespec{s.Atim, s.Mtim}
	switch s.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(sd, sn)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(target, dd, dn); err != nil {
			return &os.PathError{Op: "symlink", Path: dn, Err: err}
		}
		st.Symlinks++
		unix.UtimesNanoAt(dd, dn, times, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	case unix.S_IFREG:
		in, err := unix.Openat(sd, sn, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: sn, Err: err}
		}
		src := os.NewFile(uintptr(in), sn)
		defer src.Close()
		out, err := unix.Openat(dd, dn, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return &os.PathError{Op: "create", Path: dn, Err: err}
		}
		dst := os.NewFile(uintptr(out), dn)
		defer dst.Close()
		n, err := io.Copy(dst, src)
		if err != nil {
			return fmt.Errorf("copy %s: %w", sn, err)
		}
		if err := dst.Chmod(os.FileMode(perm(s.Mode))); err != nil {
			return err
		}
		if err := dst.Sync(); err != nil {
			return err
		}
		unix.UtimesNanoAt(dd, dn, times, unix.AT_SYMLINK_NOFOLLOW)
		st.Files++
		st.Bytes += n
		return nil
	case unix.S_IFDIR:
		in, err := unix.Openat(sd, sn, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: sn, Err: err}
		}
		defer unix.Close(in)
		if err := unix.Mkdirat(dd, dn, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: dn, Err: err}
		}
		out, err := unix.Openat(dd, dn, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: dn, Err: err}
		}
		defer unix.Close(out)
		names, err := statetree.ReadNames(in)
		if err != nil {
			return fmt.Errorf("list %s: %w", sn, err)
		}
		for _, n := range names {
			if err := copyEntry(in, n, out, n, st, depth+1); err != nil {
				return fmt.Errorf("%s/%w", sn, err)
			}
		}
		if err := unix.Fchmod(out, perm(s.Mode)); err != nil {
			return err
		}
		unix.Fsync(out)
		unix.UtimesNanoAt(dd, dn, times, unix.AT_SYMLINK_NOFOLLOW)
		st.Dirs++
		return nil
	}
	st.Skipped++
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", &os.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > 1<<16 {
			return "", errdefs.New(errdefs.ErrRefused, "%s: symlink target too long", name)
		}
	}
}

// removeAll deletes name in dirfd and everything below it, never
// following a symlink (os.RemoveAll through the descriptor's /proc path).
func removeAll(dirfd int, name string) {
	os.RemoveAll(fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name))
}
