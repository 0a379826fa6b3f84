// Package stickyignore keeps a Domain's sticky ignored paths (spec §3.4,
// §3.8, SR-13): the Agent Workspace paths that were Git-ignored (and
// untracked) at a generation's start or end, or had Ignored Workspace
// State then, and so stay routed to that state in every later generation
// even when the workspace's ignore rules no longer match them.
//
// Why. The Git-routing daemon (package gitroute) reads the host's ignore
// rules once per generation, so the sandbox cannot re-route a path during
// a generation; but .gitignore is a workspace file the sandbox may edit,
// and the next generation reads the edited copy. Without this record an
// agent could remove ".venv/" from .gitignore and see (and change) the
// host's .venv from the next generation on. Only trusted host
// configuration may turn ignore isolation off (SR-13); a workspace file is
// not that. So a path stays routed until the developer releases it from
// the host (`lazaret state ignored release PATH`, or `reset`).
//
// The record. <DomainRoot>/ignored-sticky.json, a versioned JSON document
// (Record; a newer version is refused, a malformed one is corrupt) listing
// workspace-relative paths at the granularity the router routes them: the
// topmost routed entry (".venv", ".env", "src/__pycache__"), never what
// lies below it. Its writers hold the Domain's lifecycle lock: the Host
// Coordinator at a generation's start (before the daemon starts, which
// reads it) and end, and `lazaret state ignored release|reset` while the
// Domain is stopped. Save replaces it crash-safely (a temporary file
// written and fsynced beneath the Domain Root, renamed over the record,
// the directory fsynced): a reader finds the previous record or the new
// one, never a mix.
//
// A recorded path stays routed even when the host later tracks it (`git
// add -f`, or tracked files below a sticky directory): Git would no
// longer ignore it, but the host content there was hidden from the
// sandbox before and is not exposed without the developer's decision;
// `lazaret state ignored list` says so.
//
// Scan finds the paths to record: it walks the host workspace and the
// Ignored Workspace State together, top-down, never following a symlink
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS beneath each root), and
// returns every existing path the routing decision routes to state
// without descending into it. Git directories (".git" at any depth) are
// not ignore-rule routing and are skipped.
//
// This is a primitive package: it makes the raw openat2, getdents and
// renameat calls itself.
package stickyignore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

const (
	// File is the record's name beneath the Domain Root.
	File = "ignored-sticky.json"
	// Version is the record format this Lazaret writes and the newest it
	// reads.
	Version = 1
	// MaxBytes bounds the record (about half a million paths).
	MaxBytes = 64 << 20

	tmpName = "." + File + ".tmp"
)

// Record is ignored-sticky.json.
type Record struct {
	Version int `json:"version"`
	// Paths is sorted by Path; no path is recorded twice.
	Paths []Path `json:"paths"`

	index map[string]int // Path → position in Paths
}

// Path is one sticky path.
type Path struct {
	// Path is workspace-relative and slash-separated (ValidPath).
	Path string `json:"path"`
	// Type is what was found there: file, dir, symlink, fifo, socket,
	// device.
	Type string `json:"type"`
	// FoundIn says where it existed when it became sticky: "host",
	// "state" or "host+state".
	FoundIn string `json:"found_in"`
	// Generation is the Domain generation at whose start (or end) it was
	// first found ignored; Since is when.
	Generation uint64    `json:"generation"`
	Since      time.Time `json:"since"`
}

// ValidPath checks that p is a clean workspace-relative path that can be
// sticky: not empty, not absolute, no "." or ".." component, and no ".git"
// component (Git directories are the Git Sentry's, not ignore routing).
func ValidPath(p string) error {
	switch {
	case p == "" || len(p) > 4096 || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") || strings.ContainsRune(p, 0):
		return errdefs.New(errdefs.ErrInvalid, "%q is not a clean workspace-relative path (e.g. .venv or build/out.log)", p)
	case p == ".git" || strings.HasPrefix(p, ".git/") || strings.HasSuffix(p, "/.git") || strings.Contains(p, "/.git/"):
		return errdefs.New(errdefs.ErrInvalid, "%q is in a Git directory: Git directories are protected by the Git Sentry, not by ignore isolation", p)
	}
	return nil
}

// Empty returns a record with no path.
func Empty() *Record { return &Record{Version: Version, Paths: []Path{}, index: map[string]int{}} }

func (r *Record) reindex() {
	sort.Slice(r.Paths, func(i, j int) bool { return r.Paths[i].Path < r.Paths[j].Path })
	r.index = make(map[string]int, len(r.Paths))
	for i, p := range r.Paths {
		r.index[p.Path] = i
	}
}

// Names returns the recorded paths, sorted.
func (r *Record) Names() []string {
	out := make([]string, len(r.Paths))
	for i, p := range r.Paths {
		out[i] = p.Path
	}
	return out
}

// Covering returns the recorded path that rel is or lies beneath (the
// nearest to the top), if any.
func (r *Record) Covering(rel string) (Path, bool) {
	if len(r.index) == 0 || rel == "" {
		return Path{}, false
	}
	for i := 0; ; {
		j := strings.IndexByte(rel[i:], '/')
		end := len(rel)
		if j >= 0 {
			end = i + j
		}
		if k, ok := r.index[rel[:end]]; ok {
			return r.Paths[k], true
		}
		if j < 0 {
			return Path{}, false
		}
		i = end + 1
	}
}

// Add records every found path not already covered, as of generation and
// now, and returns those it added.
func (r *Record) Add(found []Found, generation uint64, now time.Time) []Path {
	var added []Path
	for _, f := range found {
		if ValidPath(f.Path) != nil {
			continue // Scan never returns one; a Git directory is never sticky
		}
		if _, ok := r.Covering(f.Path); ok {
			continue
		}
		p := Path{Path: f.Path, Type: f.Type, FoundIn: f.FoundIn(), Generation: generation, Since: now.UTC().Truncate(time.Second)}
		r.Paths = append(r.Paths, p)
		r.index[p.Path] = len(r.Paths) - 1
		added = append(added, p)
	}
	if len(added) > 0 {
		r.reindex()
	}
	return added
}

// Release removes the sticky path rel and every recorded path beneath it,
// and returns what it removed. rel must be recorded itself: a path inside
// a sticky one is refused naming the path to give, and one that is not
// sticky is refused too (both errdefs.ErrInvalid).
func (r *Record) Release(rel string) ([]Path, error) {
	if err := ValidPath(rel); err != nil {
		return nil, err
	}
	if c, ok := r.Covering(rel); ok && c.Path != rel {
		return nil, errdefs.New(errdefs.ErrInvalid, "%s is inside the sticky path %s: give %s (`lazaret state ignored list` shows the sticky paths)", rel, c.Path, c.Path)
	}
	if _, ok := r.index[rel]; !ok {
		return nil, errdefs.New(errdefs.ErrInvalid, "%s is not sticky: `lazaret state ignored list` shows the sticky paths", rel)
	}
	return r.ReleaseWithin(rel), nil
}

// ReleaseWithin removes rel and every recorded path beneath it, if any
// (for a reset of rel's state), and returns what it removed.
func (r *Record) ReleaseWithin(rel string) []Path {
	var kept, gone []Path
	for _, p := range r.Paths {
		if p.Path == rel || strings.HasPrefix(p.Path, rel+"/") {
			gone = append(gone, p)
		} else {
			kept = append(kept, p)
		}
	}
	if kept == nil {
		kept = []Path{}
	}
	r.Paths = kept
	r.reindex()
	return gone
}

// ReleaseAll removes every path and returns them.
func (r *Record) ReleaseAll() []Path {
	gone := r.Paths
	r.Paths = []Path{}
	r.reindex()
	return gone
}

// openRoot opens the Domain Root (the caller validated it); ENOENT is
// returned as is.
func openRoot(domainRoot string) (int, error) {
	fd, err := unix.Open(domainRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open Domain Root", Path: domainRoot, Err: err}
	}
	return fd, nil
}

// Load reads the Domain's record; a Domain Root or record that does not
// exist yet is an empty record. A record of a newer version is refused
// (errdefs.ErrRefused) before anything else is read from it; a malformed
// one is errdefs.ErrCorrupt. Both errors say what to do.
func Load(domainRoot string) (*Record, error) {
	root, err := openRoot(domainRoot)
	if errors.Is(err, unix.ENOENT) {
		return Empty(), nil
	}
	if err != nil {
		return nil, errdefs.Mark(err, errdefs.ErrUnavailable)
	}
	defer unix.Close(root)
	return load(root, domainRoot)
}

func load(root int, domainRoot string) (*Record, error) {
	name := domainRoot + "/" + File
	fd, err := statetree.OpenBeneath(root, File, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return Empty(), nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, corrupt(name, "it is a symlink")
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, corrupt(name, "it is not a regular file")
	}
	if st.Size() > MaxBytes {
		return nil, corrupt(name, fmt.Sprintf("it is larger than %d bytes", MaxBytes))
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return Decode(b, name)
}

// Decode parses a record's bytes; name is only for messages.
func Decode(b []byte, name string) (*Record, error) {
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, corrupt(name, "it is not JSON: "+err.Error())
	}
	if v.Version == nil || *v.Version < 1 {
		return nil, corrupt(name, "it has no format version")
	}
	if *v.Version > Version {
		return nil, errdefs.New(errdefs.ErrRefused, "%s has format version %d, newer than this Lazaret reads (%d): a newer Lazaret wrote it; upgrade Lazaret (it is not changed)", name, *v.Version, Version)
	}
	r := &Record{}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		return nil, corrupt(name, err.Error())
	}
	if r.Paths == nil {
		r.Paths = []Path{}
	}
	seen := map[string]bool{}
	for _, p := range r.Paths {
		if err := ValidPath(p.Path); err != nil {
			return nil, corrupt(name, err.Error())
		}
		if seen[p.Path] {
			return nil, corrupt(name, fmt.Sprintf("%q is recorded twice", p.Path))
		}
		seen[p.Path] = true
	}
	r.Version = Version
	r.reindex()
	return r, nil
}

func corrupt(name, why string) error {
	return errdefs.New(errdefs.ErrCorrupt, "the Domain's record of sticky ignored paths %s is damaged (%s): Lazaret does not start the Domain or change the record while it is; restore it, or move it aside (then only the paths the workspace's Git ignore rules ignore now stay isolated)", name, why)
}

// Encode returns the record's bytes as Save writes them.
func (r *Record) Encode() ([]byte, error) {
	out := Record{Version: Version, Paths: r.Paths}
	if out.Paths == nil {
		out.Paths = []Path{}
	}
	sort.Slice(out.Paths, func(i, j int) bool { return out.Paths[i].Path < out.Paths[j].Path })
	b, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return nil, err
	}
	if len(b) >= MaxBytes {
		return nil, errdefs.New(errdefs.ErrRefused, "the record of sticky ignored paths would be larger than %d bytes (%d paths): reset the Domain's Ignored Workspace State (`lazaret state ignored reset --all`)", MaxBytes, len(out.Paths))
	}
	return append(b, '\n'), nil
}

// SaveSteps name the points of Save after which an interruption leaves
// the previous record ("tmp-written", "tmp-synced") or the new one
// ("renamed", "dir-synced").
var SaveSteps = []string{"tmp-written", "tmp-synced", "renamed", "dir-synced"}

// afterStep is called after each step of Save (tests interrupt it there).
var afterStep = func(string) {}

// Save replaces the Domain's record crash-safely: the new bytes go to a
// temporary file beneath the Domain Root (created O_EXCL, never through a
// symlink), which is fsynced and renamed over the record, and the Domain
// Root is fsynced; a leftover temporary file of an interrupted Save is
// replaced.
//
// Preconditions: the Domain's lifecycle lock is held (one writer).
func Save(domainRoot string, r *Record) error {
	b, err := r.Encode()
	if err != nil {
		return err
	}
	root, err := openRoot(domainRoot)
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrUnavailable)
	}
	defer unix.Close(root)
	if err := unix.Unlinkat(root, tmpName, 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "unlinkat", Path: tmpName, Err: err}
	}
	fd, err := statetree.OpenBeneath(root, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write the record of sticky ignored paths: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmpName)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	afterStep("tmp-written")
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmpName, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	afterStep("tmp-synced")
	if err := unix.Renameat(root, tmpName, root, File); err != nil {
		return &os.PathError{Op: "rename", Path: File, Err: err}
	}
	afterStep("renamed")
	if err := unix.Fsync(root); err != nil {
		return &os.PathError{Op: "fsync", Path: domainRoot, Err: err}
	}
	afterStep("dir-synced")
	return nil
}
