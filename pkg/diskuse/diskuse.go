// Package diskuse measures the disk use of a state tree (State Anchors,
// Ignored Workspace State, profile paths) for `lazaret ls`: the apparent
// size of its regular files and symlinks plus its directories' own size,
// counting a hard-linked file once, never following a symlink and never
// crossing into another mount. Entries are opened beneath their parent's
// descriptor (openat with O_NOFOLLOW), so a rename or symlink swap during
// the walk cannot lead it out of the tree.
//
// Trees hold files of the developer's subordinate ids, some in directories
// the developer cannot traverse: Tree reports those as Unreadable, and the
// caller measures again in the developer's user namespace (statemaint).
package diskuse

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// Usage is what one tree uses.
type Usage struct {
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"` // entries of any type, the root excluded
	// Unreadable counts directories the walk could not open or list
	// (their contents are not counted).
	Unreadable int64 `json:"unreadable,omitempty"`
}

// maxDepth bounds the walk (a deeper tree is reported unreadable below it).
const maxDepth = 512

type inode struct{ dev, ino uint64 }

// Tree measures the directory at path; a missing path is zero use.
func Tree(path string) (Usage, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return Usage{}, nil
	}
	if errors.Is(err, unix.EACCES) {
		return Usage{Unreadable: 1}, nil
	}
	if err != nil {
		return Usage{}, fmt.Errorf("measure %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Usage{}, fmt.Errorf("measure %s: %w", path, err)
	}
	w := walker{dev: st.Dev, seen: map[inode]bool{}}
	w.u.Bytes += st.Size
	w.dir(fd, 0)
	return w.u, nil
}

type walker struct {
	dev  uint64
	seen map[inode]bool
	u    Usage
}

// dir adds the entries of the open directory fd (which it does not close).
func (w *walker) dir(fd, depth int) {
	names, err := statetree.ReadNames(fd)
	if err != nil {
		w.u.Unreadable++
		return
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		w.u.Files++
		typ := st.Mode & unix.S_IFMT
		if typ != unix.S_IFDIR {
			if typ == unix.S_IFREG || typ == unix.S_IFLNK {
				if st.Nlink > 1 {
					k := inode{st.Dev, st.Ino}
					if w.seen[k] {
						continue
					}
					w.seen[k] = true
				}
				w.u.Bytes += st.Size
			}
			continue
		}
		w.u.Bytes += st.Size
		if st.Dev != w.dev {
			continue // a mount point: not this tree's
		}
		if depth >= maxDepth {
			w.u.Unreadable++
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			w.u.Unreadable++
			continue
		}
		w.dir(cfd, depth+1)
		unix.Close(cfd)
	}
}

// Human renders n bytes with a binary unit (B, KiB, MiB, GiB, TiB).
func Human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit || u == "TiB" {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return ""
}

// Names inside the Storage Root that Storage measures (they must match
// pkg/anchor's and pkg/ignoredstate's directories).
const (
	domainsDir  = "domains"
	anchorsDir  = "anchors"
	ignoredDir  = "ignored-state"
	profilesDir = "profiles"
	pathsDir    = "paths"
)

// DomainUsage is one Domain's use.
type DomainUsage struct {
	Anchors Usage `json:"state_anchors"`
	Ignored Usage `json:"ignored_state"`
}

// Report is the use of a Storage Root: per Domain (by Domain ID) and per
// profile's login state (profiles/<profile>/paths, when present).
type Report struct {
	Domains  map[string]DomainUsage `json:"domains"`
	Profiles map[string]Usage       `json:"profiles,omitempty"`
}

// Unreadable reports whether any tree had a directory the walk could not
// read.
func (r Report) Unreadable() bool {
	for _, d := range r.Domains {
		if d.Anchors.Unreadable > 0 || d.Ignored.Unreadable > 0 {
			return true
		}
	}
	for _, p := range r.Profiles {
		if p.Unreadable > 0 {
			return true
		}
	}
	return false
}

// Storage measures every Domain's State Anchors and Ignored Workspace
// State under storageRoot, and each profile's paths directory.
func Storage(storageRoot string) (Report, error) {
	r := Report{Domains: map[string]DomainUsage{}, Profiles: map[string]Usage{}}
	ids, err := subdirs(storageRoot + "/" + domainsDir)
	if err != nil {
		return r, err
	}
	for _, id := range ids {
		base := storageRoot + "/" + domainsDir + "/" + id
		var d DomainUsage
		if d.Anchors, err = Tree(base + "/" + anchorsDir); err != nil {
			return r, err
		}
		if d.Ignored, err = Tree(base + "/" + ignoredDir); err != nil {
			return r, err
		}
		r.Domains[id] = d
	}
	profiles, err := subdirs(storageRoot + "/" + profilesDir)
	if err != nil {
		return r, err
	}
	for _, p := range profiles {
		dir := storageRoot + "/" + profilesDir + "/" + p + "/" + pathsDir
		var st unix.Stat_t
		if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if r.Profiles[p], err = Tree(dir); err != nil {
			return r, err
		}
	}
	return r, nil
}

// subdirs lists the real directories (never a symlink) in dir; none when
// dir is missing.
func subdirs(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	defer unix.Close(fd)
	names, err := statetree.ReadNames(fd)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []string
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, n)
		}
	}
	return out, nil
}
