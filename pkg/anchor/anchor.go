package anchor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// RecordVersion is the version of anchor.json; newer records are refused.
const RecordVersion = 1

const (
	// Dir is the anchors directory beneath the Domain Root.
	Dir       = "anchors"
	trashDir  = ".trash"
	upperName = "upper"
	workName  = "work"
	swapName  = "upper.swap"
	record    = "anchor.json"
)

// Record is anchor.json.
type Record struct {
	Version int `json:"version"`
	// GuestPath is the persistent path inside the sandbox.
	GuestPath string `json:"guest_path"`
	// WrittenOver is the prepared-artifact ID the upper was first mounted
	// over (since its creation or last reset). When the Domain's image now
	// prepares to another artifact, package databases in the upper may
	// disagree with the new lower: `lazaret run` and `lazaret state` say so.
	WrittenOver string    `json:"written_over,omitempty"`
	Created     time.Time `json:"created"`
}

// Name returns the anchor directory name of guest path p: the path without
// its leading slash, '%' escaped as %25 and '/' as %2F ("/var/lib" ->
// "var%2Flib"). It refuses what an overlay option string cannot carry.
func Name(p string) (string, error) {
	if err := ValidGuestPath(p); err != nil {
		return "", err
	}
	s := strings.ReplaceAll(p[1:], "%", "%25")
	return strings.ReplaceAll(s, "/", "%2F"), nil
}

// GuestPath inverts Name.
func GuestPath(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, ".") || strings.Contains(name, "/") {
		return "", errdefs.New(errdefs.ErrCorrupt, "anchor name %q is not an escaped guest path", name)
	}
	p := "/" + strings.ReplaceAll(strings.ReplaceAll(name, "%2F", "/"), "%25", "%")
	if n, err := Name(p); err != nil || n != name {
		return "", errdefs.New(errdefs.ErrCorrupt, "anchor name %q is not an escaped guest path", name)
	}
	return p, nil
}

// ValidGuestPath checks that p can be a State Anchor: absolute, clean, not
// "/", and free of the characters overlay mount options reserve.
func ValidGuestPath(p string) error {
	switch {
	case !path.IsAbs(p) || path.Clean(p) != p || p == "/":
		return errdefs.New(errdefs.ErrInvalid, "persistent path %q: must be a clean absolute guest path other than /", p)
	case strings.ContainsAny(p, ",:\\\n\x00"):
		return errdefs.New(errdefs.ErrInvalid, "persistent path %q: ',', ':', '\\' and control characters cannot be used in a persistent path", p)
	}
	return nil
}

// Root returns the Domain Root of Domain id under storageRoot (the layout of
// pkg/domain); id must already be validated.
func Root(storageRoot, domainID string) string {
	return filepath.Join(storageRoot, "domains", domainID)
}

// domainRootFD opens the Domain Root itself (the caller validated it).
func domainRootFD(domainRoot string) (int, error) {
	fd, err := unix.Open(domainRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, errdefs.Mark(&os.PathError{Op: "open Domain Root", Path: domainRoot, Err: err}, errdefs.ErrUnavailable)
	}
	return fd, nil
}

// openAnchors opens (creating when create) <DomainRoot>/anchors.
func openAnchors(domainRoot string, create bool) (int, error) {
	root, err := domainRootFD(domainRoot)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	if create {
		return statetree.MkdirBeneath(root, Dir, 0o700)
	}
	return statetree.OpenDir(root, Dir)
}

func readRecord(dirfd int) (*Record, error) {
	fd, err := statetree.OpenBeneath(dirfd, record, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), record)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, err
	}
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Version == nil || *v.Version < 1 {
		return nil, errdefs.New(errdefs.ErrCorrupt, "%s: malformed or unversioned", record)
	}
	if *v.Version > RecordVersion {
		return nil, errdefs.New(errdefs.ErrRefused, "%s has version %d, this Lazaret reads up to %d: upgrade Lazaret", record, *v.Version, RecordVersion)
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("%s: %w", record, err), errdefs.ErrCorrupt)
	}
	return &r, nil
}

// writeRecord replaces anchor.json atomically (temp file, fsync, rename,
// directory fsync).
func writeRecord(dirfd int, r *Record) error {
	r.Version = RecordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := record + ".tmp"
	unix.Unlinkat(dirfd, tmp, 0)
	fd, err := statetree.OpenBeneath(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	f.Close()
	if err := unix.Renameat(dirfd, tmp, dirfd, record); err != nil {
		return &os.PathError{Op: "rename", Path: record, Err: err}
	}
	return unix.Fsync(dirfd)
}

// Info describes one State Anchor for `lazaret state list`.
type Info struct {
	Name        string `json:"name"`
	GuestPath   string `json:"guest_path"`
	WrittenOver string `json:"written_over,omitempty"`
	// Empty reports an upper with no entries (nothing persisted).
	Empty bool `json:"empty"`
	// ResetPending reports an interrupted reset (upper.swap present); the
	// active upper is complete either way (the previous or an empty one).
	ResetPending bool `json:"reset_pending,omitempty"`
}

// readAnchors opens the anchors directory of the Domain Root (read-only)
// and reads its entry names; afd is -1 (and err nil) when there is none.
// The caller closes afd.
func readAnchors(domainRoot string) (afd int, names []string, err error) {
	afd, err = openAnchors(domainRoot, false)
	if errors.Is(err, unix.ENOENT) {
		return -1, nil, nil
	}
	if err != nil {
		return -1, nil, err
	}
	if names, err = statetree.ReadNames(afd); err != nil {
		unix.Close(afd)
		return -1, nil, err
	}
	return afd, names, nil
}

// List returns the State Anchors of the Domain Root, sorted by guest path.
// It only reads developer-owned directories.
func List(domainRoot string) ([]Info, error) {
	afd, names, err := readAnchors(domainRoot)
	if err != nil || afd < 0 {
		return nil, err
	}
	defer unix.Close(afd)
	var out []Info
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			continue
		}
		gp, err := GuestPath(n)
		if err != nil {
			return nil, err
		}
		fd, err := statetree.OpenDir(afd, n)
		if err != nil {
			return nil, err
		}
		info := Info{Name: n, GuestPath: gp, Empty: true}
		if r, err := readRecord(fd); err == nil {
			if r.GuestPath != gp {
				unix.Close(fd)
				return nil, errdefs.New(errdefs.ErrCorrupt, "anchor %s records guest path %q", n, r.GuestPath)
			}
			info.WrittenOver = r.WrittenOver
		} else if !errors.Is(err, unix.ENOENT) {
			unix.Close(fd)
			return nil, fmt.Errorf("anchor %s: %w", n, err)
		}
		if ufd, err := statetree.OpenDir(fd, upperName); err == nil {
			entries, _ := statetree.ReadNames(ufd)
			info.Empty = len(entries) == 0
			unix.Close(ufd)
		}
		if _, err := openDirCheck(fd, swapName); err == nil {
			info.ResetPending = true
		}
		unix.Close(fd)
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GuestPath < out[j].GuestPath })
	return out, nil
}

func openDirCheck(dirfd int, name string) (struct{}, error) {
	fd, err := statetree.OpenDir(dirfd, name)
	if err == nil {
		unix.Close(fd)
	}
	return struct{}{}, err
}
