// Package profilestate keeps an Agent Profile's profile paths: guest
// directories (an agent's login state and settings, such as
// /home/agent/.claude) stored once per profile under the Storage Root and
// bound read-write into the sandbox of every Domain of that profile,
// whatever its workspace, so that one login serves every project.
//
// Layout beneath the Storage Root:
//
//	profiles/<profile>/
//	  lock                         flock: LOCK_SH by every Runtime Supervisor
//	                               of the profile for its life, LOCK_EX|LOCK_NB
//	                               by a reset
//	  paths/<escaped guest path>/  the developer's, 0700 (the entry)
//	    data/                      bound at the guest path; owned by the
//	                               session user's guest uid and gid
//
// <escaped guest path> is the guest path without its leading slash, '%'
// written %25 and '/' written %2F (anchor.Name), so every entry is one
// directory and the guest path is read back from its name.
//
// The data directory belongs to a guest id, that is, to one of the
// developer's subordinate ids: the developer can neither read it nor
// delete it. Its entry directory is the developer's, so a reset is one
// rename of the entry into the Storage Root's trash (package removal),
// which the next `lazaret rm`, reset or Runtime Supervisor deletes inside
// the user namespace: a crash leaves the entry either complete in place or
// wholly in the trash.
//
// Every lookup is descriptor-relative beneath the opened Storage Root
// (statetree.OpenBeneath: RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_XDEV), so a symlink planted in the layout never leads a
// creation, reset or size walk out of it.
package profilestate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/removal"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// Dir holds the profiles' state beneath the Storage Root.
const Dir = "profiles"

const (
	pathsDir = "paths"
	dataName = "data"
	lockName = "lock"
)

// EntryName is the entry directory's name of guest path g.
func EntryName(g string) (string, error) { return anchor.Name(g) }

// ProfileDir is profiles/<profile> beneath storageRoot.
func ProfileDir(storageRoot, profile string) (string, error) {
	if !domain.ValidProfileName(profile) {
		return "", errdefs.New(errdefs.ErrInvalid, "bad profile name %q", profile)
	}
	return filepath.Join(storageRoot, Dir, profile), nil
}

// Source is the host directory bound at guest path g for profile.
func Source(storageRoot, profile, g string) (string, error) {
	dir, err := ProfileDir(storageRoot, profile)
	if err != nil {
		return "", err
	}
	name, err := EntryName(g)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, pathsDir, name, dataName), nil
}

// openRoot opens the Storage Root (a directory owned by the caller's uid,
// not a symlink).
func openRoot(storageRoot string) (int, error) {
	fd, err := unix.Open(storageRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errdefs.Mark(&os.PathError{Op: "open Storage Root", Path: storageRoot, Err: err}, errdefs.ErrUnavailable)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if int(st.Uid) != os.Getuid() {
		unix.Close(fd)
		return -1, errdefs.New(errdefs.ErrRefused, "Storage Root %s is owned by uid %d, not by you (uid %d)", storageRoot, st.Uid, os.Getuid())
	}
	return fd, nil
}

// openProfile opens profiles/<profile> (creating the chain when create).
func openProfile(root int, profile string, create bool) (int, error) {
	if !domain.ValidProfileName(profile) {
		return -1, errdefs.New(errdefs.ErrInvalid, "bad profile name %q", profile)
	}
	open := statetree.OpenDir
	if create {
		open = func(fd int, name string) (int, error) { return statetree.MkdirBeneath(fd, name, 0o700) }
	}
	pfd, err := open(root, Dir)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	return open(pfd, profile)
}

// Prepare makes the data directory of guest path g of profile exist: a
// new one is an empty directory, mode 0700, owned by uid:gid (the session
// user's guest ids as the caller's namespace sees them); an existing one
// must be a plain directory and is kept as it is. It returns the host path
// to bind and whether it created it.
//
// Preconditions: namespace root of the Runtime Supervisor's user
// namespace (a guest id other than 0 is a subordinate id).
func Prepare(storageRoot, profile, g string, uid, gid int) (string, bool, error) {
	src, err := Source(storageRoot, profile, g)
	if err != nil {
		return "", false, err
	}
	name, _ := EntryName(g)
	root, err := openRoot(storageRoot)
	if err != nil {
		return "", false, err
	}
	defer unix.Close(root)
	pfd, err := openProfile(root, profile, true)
	if err != nil {
		return "", false, fmt.Errorf("profile %s state: %w", profile, err)
	}
	defer unix.Close(pfd)
	paths, err := statetree.MkdirBeneath(pfd, pathsDir, 0o700)
	if err != nil {
		return "", false, err
	}
	defer unix.Close(paths)
	efd, err := statetree.MkdirBeneath(paths, name, 0o700)
	if err != nil {
		return "", false, err
	}
	defer unix.Close(efd)
	created := false
	if err := unix.Mkdirat(efd, dataName, 0o700); err == nil {
		created = true
		dfd, err := statetree.OpenDir(efd, dataName)
		if err != nil {
			return "", false, err
		}
		err = unix.Fchown(dfd, uid, gid)
		if err == nil {
			err = unix.Fchmod(dfd, 0o700)
		}
		if err == nil {
			err = unix.Fsync(dfd)
		}
		unix.Close(dfd)
		if err == nil {
			err = unix.Fsync(efd)
		}
		if err != nil {
			return "", false, fmt.Errorf("profile path %s: own the new directory: %w", g, err)
		}
	} else if err != unix.EEXIST {
		return "", false, &os.PathError{Op: "mkdirat", Path: src, Err: err}
	}
	dfd, err := statetree.OpenDir(efd, dataName)
	if err != nil {
		return "", false, errdefs.Mark(fmt.Errorf("profile path %s of profile %s: the stored state is not a plain directory (run `lazaret state reset %s -p %s`): %w", g, profile, g, profile, err), errdefs.ErrRefused)
	}
	unix.Close(dfd)
	return src, created, nil
}

// Hold takes flock(LOCK_SH) on the profile's lock for as long as the
// returned file stays open: a Runtime Supervisor holds it while the
// profile's paths are bound into its sandbox, and no reset can take them
// away meanwhile.
//
// Preconditions: as Prepare (it may create the layout).
func Hold(storageRoot, profile string) (*os.File, error) {
	return lockProfile(storageRoot, profile, unix.LOCK_SH, true)
}

// LockExclusive takes flock(LOCK_EX|LOCK_NB) on the profile's lock: no
// sandbox of the profile runs, in any workspace, while the returned file
// stays open. A running one is ErrRefused. found is false (and the file
// nil) when the profile has no state.
func LockExclusive(storageRoot, profile string) (*os.File, bool, error) {
	f, err := lockProfile(storageRoot, profile, unix.LOCK_EX|unix.LOCK_NB, false)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, true, errdefs.New(errdefs.ErrRefused, "a sandbox of profile %s is running (in this or another workspace; `lazaret status --all` lists them): its profile paths are in use; end its sessions, then retry", profile)
	}
	return f, err == nil, err
}

func lockProfile(storageRoot, profile string, how int, create bool) (*os.File, error) {
	root, err := openRoot(storageRoot)
	if err != nil {
		if !create && errors.Is(err, unix.ENOENT) {
			return nil, unix.ENOENT
		}
		return nil, err
	}
	defer unix.Close(root)
	pfd, err := openProfile(root, profile, create)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	flags, mode := unix.O_RDWR|unix.O_NOFOLLOW, uint32(0)
	if create {
		flags, mode = flags|unix.O_CREAT, 0o600
	}
	fd, err := statetree.OpenBeneath(pfd, lockName, flags, mode)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(storageRoot, Dir, profile, lockName))
	for {
		err = unix.Flock(fd, how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// List returns the guest paths profile has state for, sorted.
func List(storageRoot, profile string) ([]string, error) {
	root, err := openRoot(storageRoot)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	pfd, err := openProfile(root, profile, false)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	paths, err := statetree.OpenDir(pfd, pathsDir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(paths)
	names, err := statetree.ReadNames(paths)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		g, err := anchor.GuestPath(n)
		if err != nil {
			return nil, fmt.Errorf("profile %s state: %w", profile, err)
		}
		out = append(out, g)
	}
	sort.Strings(out)
	return out, nil
}

// trashName names a discarded entry in the Storage Root's trash.
func trashName(now time.Time) string {
	return "profile-path." + strconv.FormatInt(now.UnixNano(), 10)
}

// Discard moves the entry of guest path g of profile into the Storage
// Root's trash (removal.TrashDir) with one rename; found is false when
// there is none. The caller holds LockExclusive and then deletes the trash
// inside the user namespace (statemaint.PurgeTrash).
func Discard(storageRoot, profile, g string, now time.Time) (bool, error) {
	name, err := EntryName(g)
	if err != nil {
		return false, err
	}
	root, err := openRoot(storageRoot)
	if err != nil {
		return false, err
	}
	defer unix.Close(root)
	pfd, err := openProfile(root, profile, false)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(pfd)
	paths, err := statetree.OpenDir(pfd, pathsDir)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(paths)
	var st unix.Stat_t
	if err := unix.Fstatat(paths, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return false, nil
	}
	tfd, err := statetree.MkdirBeneath(root, removal.TrashDir, 0o700)
	if err != nil {
		return false, err
	}
	defer unix.Close(tfd)
	if err := statetree.Discard(paths, name, tfd, trashName(now)); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("move profile path %s of profile %s aside: %w", g, profile, err)
	}
	return true, nil
}

// Usage is the size of one stored profile path.
type Usage struct {
	GuestPath string `json:"guest_path"`
	Bytes     int64  `json:"bytes"`
	Files     int64  `json:"files"`
}

// Sizes measures every stored profile path of profile (regular files'
// sizes, entries counted; symlinks are counted, never followed).
//
// Preconditions: namespace root of the developer's user namespace (the
// data belongs to guest ids).
func Sizes(storageRoot, profile string) ([]Usage, error) {
	gs, err := List(storageRoot, profile)
	if err != nil {
		return nil, err
	}
	root, err := openRoot(storageRoot)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	var out []Usage
	for _, g := range gs {
		name, _ := EntryName(g)
		u := Usage{GuestPath: g}
		dfd, err := statetree.OpenDir(root, filepath.Join(Dir, profile, pathsDir, name, dataName))
		if errors.Is(err, unix.ENOENT) {
			out = append(out, u)
			continue
		}
		if err != nil {
			return nil, err
		}
		err = walk(dfd, &u, 0)
		unix.Close(dfd)
		if err != nil {
			return nil, fmt.Errorf("measure profile path %s: %w", g, err)
		}
		out = append(out, u)
	}
	return out, nil
}

func walk(dfd int, u *Usage, depth int) error {
	if depth > statetree.MaxDepth {
		return errdefs.New(errdefs.ErrRefused, "directory nesting deeper than %d", statetree.MaxDepth)
	}
	names, err := statetree.ReadNames(dfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return err
		}
		u.Files++
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			u.Bytes += st.Size
		case unix.S_IFDIR:
			cfd, err := statetree.OpenDir(dfd, n)
			if err != nil {
				return err
			}
			err = walk(cfd, u, depth+1)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckImage refuses a guest path g that the prepared lower lowerRoot has
// as something other than a directory (a file, a symlink, or beneath
// one): a profile path is a directory bound there, which would hide or
// replace it. A missing path is fine (the mount-point skeleton provides
// it).
func CheckImage(lowerRoot, g string) error {
	lfd, err := unix.Open(lowerRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open lower", Path: lowerRoot, Err: err}
	}
	defer unix.Close(lfd)
	fd, err := statetree.OpenBeneath(lfd, g[1:], unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		return nil
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
		return errdefs.New(errdefs.ErrRefused, "profile path %s is a file or a symlink (or lies beneath one) in the image: profile paths are directories; keep the directory the file is in instead, or point the program at a directory (see profile_paths in docs/CONFIG.md)", g)
	}
	return fmt.Errorf("profile path %s in the image: %w", g, err)
}
