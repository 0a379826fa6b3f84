package prepared

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ControlDir is the fixed Lazaret control directory inside the sandbox.
const ControlDir = "/.lazaret"

// FormatVersion is the version of the preparer's output (tree contents and
// artifact.json schema). It is part of the prepared-artifact ID; records
// with a newer version are refused.
//
// History: 1 initial; 2 adds the default State Anchor directories (/usr,
// /var/lib, /opt, /root, /home) to the guaranteed mount points.
const FormatVersion = 2

// MountPoint is a path every prepared rootfs contains so that the sandbox
// runtime can mount over it without writing to the read-only lower.
type MountPoint struct {
	// Path is absolute inside the rootfs.
	Path string
	// Dir tells a directory from a regular file.
	Dir bool
	// Mode is used when the preparer has to create the path (owner 0:0).
	Mode os.FileMode
}

// MountPoints lists, parents first, the mount points every prepared lower
// contains (EnsureMountPoints creates them, validation checks them).
var MountPoints = []MountPoint{
	{Path: "/proc", Dir: true, Mode: 0o755},
	{Path: "/sys", Dir: true, Mode: 0o755},
	{Path: "/dev", Dir: true, Mode: 0o755},
	{Path: "/dev/pts", Dir: true, Mode: 0o755},
	{Path: "/dev/shm", Dir: true, Mode: 0o755},
	{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
	{Path: "/workspace", Dir: true, Mode: 0o755},
	{Path: ControlDir, Dir: true, Mode: 0o755},
	{Path: "/etc", Dir: true, Mode: 0o755},
	{Path: "/etc/hosts", Mode: 0o644},
	{Path: "/etc/hostname", Mode: 0o644},
	{Path: "/etc/resolv.conf", Mode: 0o644},
	// The default State Anchor paths (config.DefaultPersistentPaths), so
	// that every image can carry them: an overlay's lower must exist.
	{Path: "/usr", Dir: true, Mode: 0o755},
	{Path: "/var", Dir: true, Mode: 0o755},
	{Path: "/var/lib", Dir: true, Mode: 0o755},
	{Path: "/opt", Dir: true, Mode: 0o755},
	{Path: "/root", Dir: true, Mode: 0o700},
	{Path: "/home", Dir: true, Mode: 0o755},
}

// SourceIdentity identifies the image an artifact was prepared from.
type SourceIdentity struct {
	// Ref is the transport-qualified reference used at preparation time.
	Ref string `json:"ref"`
	// ManifestDigest is the digest of the single-platform image manifest
	// (the instance chosen from a manifest list, if any).
	ManifestDigest string `json:"manifest_digest"`
	// ConfigDigest is the digest of the image configuration.
	ConfigDigest string `json:"config_digest"`
}

// Artifact is a published prepared lower.
type Artifact struct {
	// ID is the prepared-artifact ID ("pl-" + 32 hex).
	ID string
	// Dir is the artifact directory, StorageRoot/prepared/ID. Paths are
	// lookup hints: open them beneath the Storage Root descriptor.
	Dir string
	// Rootfs is Dir/rootfs, the tree to expose read-only as the lower.
	Rootfs string
	// Source is the image the artifact was prepared from.
	Source SourceIdentity
	// Created is when the artifact was prepared.
	Created time.Time
}

// Errors returned (wrapped) by this package; test with errors.Is.
var (
	// ErrNewerFormat: an artifact record was written by a newer Lazaret.
	ErrNewerFormat = errors.New("prepared artifact has a newer format version")
	// ErrCorrupt: an artifact record or tree is unreadable or inconsistent.
	ErrCorrupt = errors.New("prepared artifact is corrupt")
)

const (
	preparedDir = "prepared"
	stagingDir  = ".staging"
	rootfsName  = "rootfs"
	recordName  = "artifact.json"
	idPrefix    = "pl-"
)

// ArtifactID returns the prepared-artifact ID of the image with the given
// manifest digest.
func ArtifactID(manifestDigest string) string {
	h := sha256.New()
	fmt.Fprintf(h, "lazaret prepared lower\x00format %d\x00%s", FormatVersion, manifestDigest)
	return idPrefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// ValidID reports whether id has the form of a prepared-artifact ID:
// idPrefix and 32 lower-case hexadecimal digits. (Written out: the
// equivalent regular expression, with its bounded repetition, was compiled
// at every start of each binary that links this package.)
func ValidID(id string) bool {
	h, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(h) != 32 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ArtifactFor is the Artifact a record under storageRoot describes.
func ArtifactFor(storageRoot string, rec *Record) Artifact {
	dir := filepath.Join(storageRoot, preparedDir, rec.ID)
	return Artifact{
		ID:      rec.ID,
		Dir:     dir,
		Rootfs:  filepath.Join(dir, rootfsName),
		Source:  rec.Source,
		Created: rec.Created,
	}
}

// HumanBytes formats a byte count as Lazaret's progress lines and state
// reports show it (B, KiB, MiB, GiB).
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// LookupID finds and validates a published artifact by its ID, e.g. one
// recorded in the Domain Store. found is false when it does not exist.
func LookupID(storageRoot, id string) (Artifact, bool, error) {
	if !ValidID(id) {
		return Artifact{}, false, fmt.Errorf("prepare: %q is not a prepared-artifact ID (want pl- and 32 hex digits)", id)
	}
	if !filepath.IsAbs(storageRoot) {
		return Artifact{}, false, fmt.Errorf("prepare: storage root %q is not an absolute path", storageRoot)
	}
	return LookupDigest(storageRoot, id, "")
}

// LookupDigest finds and validates the published artifact id, checking
// that it was prepared from manifestDigest when that is not empty. found
// is false when the Storage Root has no such artifact.
func LookupDigest(storageRoot, id, manifestDigest string) (Artifact, bool, error) {
	st, err := OpenStore(storageRoot, false)
	if errors.Is(err, os.ErrNotExist) {
		return Artifact{}, false, nil
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("prepare %s: %w", id, err)
	}
	defer st.Close()
	rec, found, err := st.Lookup(id, manifestDigest)
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("prepare %s: %w", id, err)
		}
		return Artifact{}, false, err
	}
	return ArtifactFor(storageRoot, rec), true, nil
}
