// Package statetree is the descriptor-relative mechanism shared by the
// maintenance of a Domain's persistent state trees — State Anchor uppers
// (package anchor) and Ignored Workspace State (package ignoredstate) —
// for `lazaret state`, and by their removal for `lazaret rm` (package
// removal) (spec §3.8, SR-14, OR-5):
//
//   - confined opens: every path is resolved beneath a directory descriptor
//     with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|
//     RESOLVE_NO_XDEV), so no symlink or mount planted in the Domain Root
//     leads maintenance outside it;
//   - the crash-consistent reset (SwapEmpty): an empty directory is
//     exchanged in with renameat2(RENAME_EXCHANGE) and the previous tree
//     moved to a trash directory, so an interruption at any step leaves the
//     previous tree or a complete empty one active, never a partial one;
//   - Discard: one subtree moved to the trash with a single rename;
//   - trash deletion (RemoveAllAt), run as namespace root in the Domain's
//     user namespace, where subordinate-uid files can be removed;
//   - the structural verification walk (Checker), which never follows a
//     symlink and reports what it finds as data.
//
// This is a primitive package: it makes the raw openat2, renameat2, statx
// and unlinkat calls itself.
package statetree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
)

// resolveBeneath keeps every lookup inside the directory descriptor.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// MaxDepth bounds every recursive walk.
const MaxDepth = 4096

// OpenBeneath opens p (relative, slash-separated) beneath dirfd without
// following any symlink or crossing a mount; O_CLOEXEC is added.
func OpenBeneath(dirfd int, p string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveBeneath}
	for {
		fd, err := unix.Openat2(dirfd, p, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: p, Err: err}
		}
		return fd, nil
	}
}

// OpenDir opens directory p beneath dirfd; a symlink or another filesystem
// there is refused (errdefs.ErrRefused), absence is ENOENT.
func OpenDir(dirfd int, p string) (int, error) {
	fd, err := OpenBeneath(dirfd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR)) {
		return -1, errdefs.Mark(fmt.Errorf("%s is not a plain directory beneath the Domain Root (a symlink or another filesystem is there): %w", p, err), errdefs.ErrRefused)
	}
	return fd, err
}

// MkdirBeneath creates directory name in dirfd (mode; an existing one is
// fine) and opens it.
func MkdirBeneath(dirfd int, name string, mode uint32) (int, error) {
	if err := unix.Mkdirat(dirfd, name, mode); err != nil && err != unix.EEXIST {
		return -1, &os.PathError{Op: "mkdirat", Path: name, Err: err}
	}
	return OpenDir(dirfd, name)
}

// MkdirAllBeneath creates every directory of the slash-separated path rel
// beneath dirfd, one component at a time (mode; existing ones are fine;
// never through a symlink or onto another filesystem), and opens the last;
// with no component it opens a duplicate of dirfd. The caller closes it.
func MkdirAllBeneath(dirfd int, rel string, mode uint32) (int, error) {
	dir, err := unix.Dup(dirfd)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" {
			continue
		}
		next, err := MkdirBeneath(dir, c, mode)
		unix.Close(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	return dir, nil
}

// IsDir reports whether name is a plain directory in dirfd (false with a
// nil error when absent).
func IsDir(dirfd int, name string) (bool, error) {
	fd, err := OpenDir(dirfd, name)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	unix.Close(fd)
	return true, nil
}

// ReadNames lists a directory descriptor's entries (without . and ..)
// without following anything; dirfd's offset is not disturbed for later
// users because a duplicate is rewound and read.
func ReadNames(dirfd int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// Swap names the directories of one crash-consistent reset: in directory
// Dir, Active is exchanged with an empty Swap directory and the previous
// tree moved to TrashDir as TrashName(). Fail prefixes each step's
// failpoint ("<Fail><step>", steps SwapSteps).
type Swap struct {
	Dir       int
	Active    string
	SwapName  string
	TrashDir  int
	TrashName func() string
	Fail      string
	// Mode of the new empty directory.
	Mode uint32
}

// SwapSteps are the failpoint steps of SwapEmpty, in order.
var SwapSteps = []string{"swap-recovered", "empty-created", "exchanged", "trashed"}

// SwapEmpty makes Active a complete empty directory (spec OR-5). Steps,
// each a single mkdir or rename beneath Dir followed by fsync:
//
//  1. finish an interrupted reset: move a leftover Swap to the trash;
//  2. mkdir Swap (empty);
//  3. renameat2(Swap, Active, RENAME_EXCHANGE) — or, when there is no
//     Active yet, RENAME_NOREPLACE;
//  4. renameat2(Swap, trash/<TrashName()>, RENAME_NOREPLACE).
//
// A crash anywhere leaves Active the previous tree or a complete empty one;
// step 1 (here or in FinishSwap at the next start) finishes the rest.
func SwapEmpty(s Swap) error {
	hit := func(step string) {
		if s.Fail != "" {
			failpoint.Hit(s.Fail + step)
		}
	}
	if err := FinishSwap(s); err != nil {
		return err
	}
	hit("swap-recovered")
	if err := unix.Mkdirat(s.Dir, s.SwapName, s.Mode); err != nil {
		return &os.PathError{Op: "mkdirat", Path: s.SwapName, Err: err}
	}
	if err := unix.Fsync(s.Dir); err != nil {
		return err
	}
	hit("empty-created")
	if ok, err := IsDir(s.Dir, s.Active); err != nil {
		return err
	} else if !ok {
		if err := unix.Renameat2(s.Dir, s.SwapName, s.Dir, s.Active, unix.RENAME_NOREPLACE); err != nil {
			return &os.PathError{Op: "renameat2", Path: s.Active, Err: err}
		}
		return unix.Fsync(s.Dir)
	}
	if err := unix.Renameat2(s.Dir, s.SwapName, s.Dir, s.Active, unix.RENAME_EXCHANGE); err != nil {
		return &os.PathError{Op: "renameat2 exchange", Path: s.Active, Err: err}
	}
	if err := unix.Fsync(s.Dir); err != nil {
		return err
	}
	hit("exchanged")
	if err := FinishSwap(s); err != nil {
		return err
	}
	hit("trashed")
	return nil
}

// FinishSwap moves a present Swap directory into the trash. Whatever it
// holds (an empty directory not yet exchanged, or the previous tree), the
// active tree is complete.
func FinishSwap(s Swap) error {
	if ok, err := IsDir(s.Dir, s.SwapName); err != nil || !ok {
		return err
	}
	return Discard(s.Dir, s.SwapName, s.TrashDir, s.TrashName())
}

// Discard moves name (a file or a whole subtree) of dirfd into trash
// directory trashfd as dst (or dst.N when taken) with one rename
// (RENAME_NOREPLACE), then syncs both directories: the entry is either
// still in place or wholly in the trash.
func Discard(dirfd int, name string, trashfd int, dst string) error {
	for i := 0; ; i++ {
		d := dst
		if i > 0 {
			d = dst + "." + strconv.Itoa(i)
		}
		err := unix.Renameat2(dirfd, name, trashfd, d, unix.RENAME_NOREPLACE)
		if err == nil {
			break
		}
		if err != unix.EEXIST || i >= 1000 {
			return &os.PathError{Op: "renameat2 to trash", Path: d, Err: err}
		}
	}
	if err := unix.Fsync(trashfd); err != nil {
		return err
	}
	return unix.Fsync(dirfd)
}

// Purge deletes every entry of trash directory trashfd and returns how
// many there were.
//
// Preconditions: namespace root of the Domain's user namespace when the
// trash may hold subordinate-uid files.
func Purge(trashfd int) (int, error) {
	return PurgeContext(context.Background(), trashfd)
}

// PurgeContext is Purge that stops before the next directory entry once
// ctx is done and returns how many trash entries it deleted and ctx's
// error (wrapped): what it deleted stays deleted, the rest stays in the
// trash for a later Purge.
func PurgeContext(ctx context.Context, trashfd int) (int, error) {
	names, err := ReadNames(trashfd)
	if err != nil {
		return 0, err
	}
	for i, n := range names {
		if err := removeAllAt(ctx, trashfd, n, 0); err != nil {
			return i, fmt.Errorf("delete trash entry %s: %w", n, err)
		}
	}
	return len(names), unix.Fsync(trashfd)
}

// RemoveAllAt removes name (a file or a directory tree) beneath dirfd,
// never following a symlink: each directory is opened beneath its parent.
// An entry that disappears meanwhile (two processes deleting one trash, as
// `lazaret rm` and a Runtime Supervisor may) counts as removed.
func RemoveAllAt(dirfd int, name string, depth int) error {
	return removeAllAt(context.Background(), dirfd, name, depth)
}

// removeAllAt is RemoveAllAt that stops before the next directory entry
// once ctx is done, with ctx's error.
func removeAllAt(ctx context.Context, dirfd int, name string, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > MaxDepth {
		return errdefs.New(errdefs.ErrRefused, "directory nesting deeper than %d", MaxDepth)
	}
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	fd, err := OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.EACCES) && openUp(dirfd, name) {
		fd, err = OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	}
	if errors.Is(err, unix.ENOENT) {
		return nil // a concurrent deletion of the same trash got there first
	}
	if err != nil {
		return err
	}
	// An upper's directories may be mode 0 or owned by another mapped id:
	// namespace root may change them.
	unix.Fchmod(fd, 0o700)
	children, err := ReadNames(fd)
	if err != nil {
		unix.Close(fd)
		return err
	}
	for _, c := range children {
		if err := removeAllAt(ctx, fd, c, depth+1); err != nil {
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

// openUp makes directory name of dirfd searchable and readable by its
// owner (mode 0700) without following a symlink: it is opened O_PATH
// beneath dirfd and changed through that exact inode. It is what lets the
// owner outside a user namespace delete a tree with mode-0 directories;
// namespace root needs it only for ids it does not map.
func openUp(dirfd int, name string) bool {
	fd, err := OpenBeneath(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), 0o700, 0) == nil
}

// FileType names the type of an inode mode as the state reports show it:
// file, dir, symlink, fifo, socket or device.
func FileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "device"
}
