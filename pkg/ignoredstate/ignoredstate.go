// Package ignoredstate maintains a Domain's Ignored Workspace State (spec
// §3.4, §3.8, SR-13, FR-4, DX-2, DX-6, OR-5) for `lazaret state ignored`:
// list, inspect, reset and verify, kept apart from State Anchors.
//
// Layout beneath the Domain Root (the Git-routing daemon, package
// gitroute, serves the state directory):
//
//	ignored-state/          workspace-relative mirror: a Git-ignored path
//	                        P lives at ignored-state/P; its non-ignored
//	                        ancestors are "mirror" directories created on
//	                        demand
//	ignored-state.swap/     transient during a reset --all (statetree.Swap)
//	ignored-state.trash/    state discarded by reset; deleted in the user
//	                        namespace by the next Runtime Supervisor
//
// An entry of the state is a "root" when the routing rules route it to
// state and its parent does not (the topmost ignored path, e.g.
// node_modules); List reports roots with their sizes, and entries the
// current rules no longer route to state as stale (the sandbox does not
// see them). Every path is opened beneath the Domain Root's descriptor
// with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV (package
// statetree); nothing is followed.
package ignoredstate

import (
	"errors"
	"os"
	"path"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/statetree"
)

const (
	// Dir is the state directory beneath the Domain Root.
	Dir      = "ignored-state"
	swapName = Dir + ".swap"
	trashDir = Dir + ".trash"
)

// ResetFailpoint prefixes the failpoints of ResetAll's steps
// (statetree.SwapSteps) and of Reset's one step ("path-trashed"); both run
// in lazaret-rs's state-maintenance role (package statemaint).
const ResetFailpoint = "lazaret-rs:ignored-reset:"

// Classifier reports whether a workspace-relative path is routed to the
// state (the Git-routing daemon's decision for this workspace).
type Classifier func(rel string, isDir bool) bool

// Entry is one ignored path that has state.
type Entry struct {
	// Path is workspace-relative.
	Path string `json:"path"`
	Type string `json:"type"`
	statetree.Counts
	// Stale: the current rules no longer route this path to state, so the
	// sandbox does not see it; reset removes it.
	Stale bool `json:"stale,omitempty"`
	// Unreadable lists subdirectories the caller could not read (files of a
	// subordinate id with a private mode); their sizes are not counted.
	Unreadable []string `json:"unreadable,omitempty"`
}

func openRoot(domainRoot string) (int, error) {
	fd, err := unix.Open(domainRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errdefs.Mark(&os.PathError{Op: "open Domain Root", Path: domainRoot, Err: err}, errdefs.ErrUnavailable)
	}
	return fd, nil
}

// openState opens <domainRoot>/ignored-state; (-1, nil) when absent.
func openState(domainRoot string) (int, error) {
	root, err := openRoot(domainRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := statetree.OpenDir(root, Dir)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	return fd, err
}

// List returns the ignored paths that have state, sorted by path. It only
// reads.
func List(domainRoot string, ignored Classifier) ([]Entry, error) {
	sfd, err := openState(domainRoot)
	if sfd < 0 || err != nil {
		return nil, err
	}
	defer unix.Close(sfd)
	var out []Entry
	if err := listDir(sfd, "", ignored, &out, 0); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func listDir(dirfd int, rel string, ignored Classifier, out *[]Entry, depth int) error {
	if depth > statetree.MaxDepth {
		return errdefs.New(errdefs.ErrRefused, "%s: directory nesting deeper than %d", rel, statetree.MaxDepth)
	}
	names, err := statetree.ReadNames(dirfd)
	if err != nil {
		*out = append(*out, Entry{Path: rel, Type: "dir", Unreadable: []string{rel}})
		return nil
	}
	for _, n := range names {
		p := path.Join(rel, n)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if ignored(p, isDir) {
			e := Entry{Path: p, Type: statetree.FileType(st.Mode)}
			size(dirfd, n, &st, &e, 0)
			*out = append(*out, e)
			continue
		}
		if !isDir {
			e := Entry{Path: p, Type: statetree.FileType(st.Mode), Stale: true}
			size(dirfd, n, &st, &e, 0)
			*out = append(*out, e)
			continue
		}
		// A mirror directory (a non-ignored ancestor of ignored paths).
		fd, err := statetree.OpenBeneath(dirfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			*out = append(*out, Entry{Path: p, Type: "dir", Unreadable: []string{p}})
			continue
		}
		err = listDir(fd, p, ignored, out, depth+1)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// size adds the entry name of dirfd (stat st) and everything beneath it to
// e's counts, never following a symlink.
func size(dirfd int, name string, st *unix.Stat_t, e *Entry, depth int) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Files++
		e.Bytes += st.Size
		return
	case unix.S_IFLNK:
		e.Symlinks++
		return
	case unix.S_IFDIR:
	default:
		e.Files++
		return
	}
	e.Dirs++
	if depth > statetree.MaxDepth {
		return
	}
	fd, err := statetree.OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		e.Unreadable = append(e.Unreadable, name)
		return
	}
	defer unix.Close(fd)
	names, err := statetree.ReadNames(fd)
	if err != nil {
		e.Unreadable = append(e.Unreadable, name)
		return
	}
	for _, n := range names {
		var cst unix.Stat_t
		if unix.Fstatat(fd, n, &cst, unix.AT_SYMLINK_NOFOLLOW) == nil {
			size(fd, n, &cst, e, depth+1)
		}
	}
}

// openTrash opens (creating) the trash beside the state directory.
func openTrash(root int) (int, error) {
	return statetree.MkdirBeneath(root, trashDir, 0o700)
}

func trashName(now func() time.Time, what string) func() string {
	return func() string { return strconv.FormatInt(now().UnixNano(), 10) + "." + what }
}

// Reset discards the state of the workspace-relative path rel (an entry
// List reports) with one rename into the trash: an interruption leaves it
// either wholly in place or wholly discarded; the sandbox then finds the
// ignored path empty (it never sees the host's content there). It reports
// whether there was state at rel.
//
// Preconditions: the Domain's lifecycle lock is held and nothing uses the
// state (InUse).
func Reset(domainRoot, rel string, now func() time.Time) (bool, error) {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == "." || rel == ".." || len(rel) > 2 && rel[:3] == "../" {
		return false, errdefs.New(errdefs.ErrInvalid, "ignored path %q: give a clean workspace-relative path as `lazaret state ignored list` shows it", rel)
	}
	root, err := openRoot(domainRoot)
	if err != nil {
		return false, err
	}
	defer unix.Close(root)
	sfd, err := statetree.OpenDir(root, Dir)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(sfd)
	parent, name := path.Split(rel)
	pfd := sfd
	if parent != "" {
		if pfd, err = statetree.OpenDir(sfd, path.Clean(parent)); errors.Is(err, unix.ENOENT) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		defer unix.Close(pfd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, &os.PathError{Op: "fstatat", Path: rel, Err: err}
	}
	tfd, err := openTrash(root)
	if err != nil {
		return true, err
	}
	defer unix.Close(tfd)
	if err := statetree.Discard(pfd, name, tfd, trashName(now, "path")()); err != nil {
		return true, err
	}
	failpoint.Hit(ResetFailpoint + "path-trashed")
	return true, nil
}

// ResetAll replaces the whole state directory with a complete empty one
// (statetree.SwapEmpty: an interruption at any step leaves the previous
// state or a complete empty one active).
//
// Preconditions: as Reset.
func ResetAll(domainRoot string, now func() time.Time) error {
	root, err := openRoot(domainRoot)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	tfd, err := openTrash(root)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	return statetree.SwapEmpty(stateSwap(root, tfd, now))
}

func stateSwap(root, tfd int, now func() time.Time) statetree.Swap {
	return statetree.Swap{Dir: root, Active: Dir, SwapName: swapName, TrashDir: tfd, Mode: 0o700, Fail: ResetFailpoint, TrashName: trashName(now, "all")}
}

// Recover finishes an interrupted ResetAll (moves a leftover swap
// directory to the trash). Idempotent.
func Recover(domainRoot string, now func() time.Time) error {
	root, err := openRoot(domainRoot)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	if ok, err := statetree.IsDir(root, swapName); err != nil || !ok {
		return err
	}
	tfd, err := openTrash(root)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	return statetree.FinishSwap(stateSwap(root, tfd, now))
}

// TrashEntries counts discarded state waiting to be deleted.
func TrashEntries(domainRoot string) (int, error) {
	tfd, err := existingTrash(domainRoot)
	if tfd < 0 || err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	names, err := statetree.ReadNames(tfd)
	return len(names), err
}

// existingTrash opens the Domain's ignored-state trash; (-1, nil) when
// there is none.
func existingTrash(domainRoot string) (int, error) {
	root, err := openRoot(domainRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	tfd, err := statetree.OpenDir(root, trashDir)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	return tfd, err
}

// PurgeTrash finishes an interrupted reset and deletes the trash.
//
// Preconditions: namespace root of the Domain's user namespace (the
// Runtime Supervisor), where subordinate-uid files can be removed.
func PurgeTrash(domainRoot string, now func() time.Time) (int, error) {
	if err := Recover(domainRoot, now); err != nil {
		return 0, err
	}
	tfd, err := existingTrash(domainRoot)
	if tfd < 0 || err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	return statetree.Purge(tfd)
}
