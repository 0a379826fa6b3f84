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
	"runtime"
	"sort"
	"strings"
	"sync"

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
func Tree(path string) (Usage, error) { return tree(path, false) }

// tree is Tree; with stopAtUnreadable, the walk ends at the first
// directory it cannot open or list (Unreadable 1, the counts partial):
// the caller measures that tree again where it can read it.
func tree(path string, stopAtUnreadable bool) (Usage, error) {
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
	w := walker{dev: st.Dev, seen: map[inode]bool{}, stop: stopAtUnreadable}
	w.u.Bytes += st.Size
	w.dir(fd, 0)
	return w.u, nil
}

type walker struct {
	dev  uint64
	seen map[inode]bool
	stop bool // end the walk at the first unreadable directory
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
		if w.stop && w.u.Unreadable > 0 {
			return
		}
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

// TreeKey names one tree of a Storage Root: a Domain's State Anchors
// (KindAnchors) or Ignored Workspace State (KindIgnored) by Domain ID, or a
// profile's paths directory (KindProfile) by profile name. Its text form,
// KIND/NAME, is how the state maintenance role is told which trees to
// measure.
type TreeKey struct {
	Kind, Name string
}

// Kinds of TreeKey.
const (
	KindAnchors = "anchors"
	KindIgnored = "ignored"
	KindProfile = "profile"
)

func (k TreeKey) String() string { return k.Kind + "/" + k.Name }

// ParseTreeKey parses KIND/NAME; NAME is one path element.
func ParseTreeKey(s string) (TreeKey, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || (kind != KindAnchors && kind != KindIgnored && kind != KindProfile) || name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return TreeKey{}, fmt.Errorf("tree %q: want anchors/DOMAIN-ID, ignored/DOMAIN-ID or profile/NAME", s)
	}
	return TreeKey{Kind: kind, Name: name}, nil
}

// Options select what Storage measures and how.
type Options struct {
	// Only, when non-nil, names the only trees measured (the Report
	// holds those alone).
	Only []TreeKey
	// StopAtUnreadable ends a tree's walk at its first directory that
	// cannot be read: such a tree is measured again elsewhere (its
	// counts are partial), so the rest of its walk would be wasted.
	StopAtUnreadable bool
	// Workers bounds the trees measured at once (default: the CPUs
	// this process may use, at least 2 — a walk waits on the disk as
	// often as it computes — and at most 8).
	Workers int
}

// Storage measures every Domain's State Anchors and Ignored Workspace
// State under storageRoot, and each profile's paths directory, several
// trees at once.
func Storage(storageRoot string, opts Options) (Report, error) {
	r := Report{Domains: map[string]DomainUsage{}, Profiles: map[string]Usage{}}
	keys, err := storageTrees(storageRoot, opts.Only)
	if err != nil {
		return r, err
	}
	type result struct {
		u   Usage
		err error
	}
	results := make([]result, len(keys))
	workers := opts.Workers
	if workers <= 0 {
		workers = min(max(runtime.GOMAXPROCS(0), 2), 8)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i].u, results[i].err = tree(treePath(storageRoot, keys[i]), opts.StopAtUnreadable)
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, k := range keys {
		if results[i].err != nil {
			return r, results[i].err
		}
		r.set(k, results[i].u)
	}
	return r, nil
}

// set records u as the use of the tree k.
func (r Report) set(k TreeKey, u Usage) {
	switch k.Kind {
	case KindProfile:
		r.Profiles[k.Name] = u
	case KindAnchors:
		d := r.Domains[k.Name]
		d.Anchors = u
		r.Domains[k.Name] = d
	case KindIgnored:
		d := r.Domains[k.Name]
		d.Ignored = u
		r.Domains[k.Name] = d
	}
}

// UnreadableTrees lists the trees of r that had a directory the walk
// could not read, in a stable order.
func (r Report) UnreadableTrees() []TreeKey {
	var out []TreeKey
	for id, d := range r.Domains {
		if d.Anchors.Unreadable > 0 {
			out = append(out, TreeKey{KindAnchors, id})
		}
		if d.Ignored.Unreadable > 0 {
			out = append(out, TreeKey{KindIgnored, id})
		}
	}
	for p, u := range r.Profiles {
		if u.Unreadable > 0 {
			out = append(out, TreeKey{KindProfile, p})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Merge replaces r's trees named by keys with other's (another pass
// over them: Options.Only); a tree other lacks (gone meanwhile) keeps r's.
func (r Report) Merge(other Report, keys []TreeKey) {
	for _, k := range keys {
		if u, ok := other.get(k); ok {
			r.set(k, u)
		}
	}
}

// get is the use of the tree k, if r measured it.
func (r Report) get(k TreeKey) (Usage, bool) {
	if k.Kind == KindProfile {
		u, ok := r.Profiles[k.Name]
		return u, ok
	}
	d, ok := r.Domains[k.Name]
	if k.Kind == KindIgnored {
		return d.Ignored, ok
	}
	return d.Anchors, ok
}

// storageTrees lists the trees of storageRoot: every Domain's two and
// every profile's paths directory that exists, or those of only that
// exist as their kind's directory (a Domain's trees whenever its
// directory does, as a missing tree is zero use).
func storageTrees(storageRoot string, only []TreeKey) ([]TreeKey, error) {
	var keys []TreeKey
	if only != nil {
		for _, k := range only {
			if k.Kind == KindProfile {
				if isDir(treePath(storageRoot, k)) {
					keys = append(keys, k)
				}
			} else if isDir(storageRoot + "/" + domainsDir + "/" + k.Name) {
				keys = append(keys, k)
			}
		}
		return keys, nil
	}
	ids, err := subdirs(storageRoot + "/" + domainsDir)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		keys = append(keys, TreeKey{KindAnchors, id}, TreeKey{KindIgnored, id})
	}
	profiles, err := subdirs(storageRoot + "/" + profilesDir)
	if err != nil {
		return nil, err
	}
	for _, p := range profiles {
		if k := (TreeKey{KindProfile, p}); isDir(treePath(storageRoot, k)) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// treePath is where the tree k lies under storageRoot.
func treePath(storageRoot string, k TreeKey) string {
	switch k.Kind {
	case KindAnchors:
		return storageRoot + "/" + domainsDir + "/" + k.Name + "/" + anchorsDir
	case KindIgnored:
		return storageRoot + "/" + domainsDir + "/" + k.Name + "/" + ignoredDir
	}
	return storageRoot + "/" + profilesDir + "/" + k.Name + "/" + pathsDir
}

// isDir reports whether path is a directory (never through a symlink).
func isDir(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
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
