package prepared

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Record is artifact.json. Fields are only ever added; a change of
// meaning bumps FormatVersion.
type Record struct {
	FormatVersion int            `json:"format_version"`
	ID            string         `json:"id"`
	Source        SourceIdentity `json:"source"`
	// Preparer names the preparing code: format and library versions.
	Preparer string        `json:"preparer"`
	Created  time.Time     `json:"created"`
	Layers   []LayerRecord `json:"layers"`
	// RootfsBytes is the sum of the applied file sizes.
	RootfsBytes int64 `json:"rootfs_bytes"`
	// SkippedDeviceNodes counts block and character devices left out.
	SkippedDeviceNodes int `json:"skipped_device_nodes"`
	// SkippedDevicePaths lists the first of them.
	SkippedDevicePaths []string `json:"skipped_device_paths,omitempty"`
	// ConvertedWhiteoutDevices counts 0/0 character devices applied as
	// OCI whiteouts.
	ConvertedWhiteoutDevices int      `json:"converted_whiteout_devices"`
	CreatedMountPoints       []string `json:"created_mount_points,omitempty"`
	// ReplacedMountPoints lists image entries of the wrong type (e.g. a
	// symlinked /etc/resolv.conf) replaced by a plain mount point.
	ReplacedMountPoints []string `json:"replaced_mount_points,omitempty"`
}

// LayerRecord is one applied layer of a Record.
type LayerRecord struct {
	Digest    string `json:"digest"`
	DiffID    string `json:"diff_id"`
	MediaType string `json:"media_type,omitempty"`
	Size      int64  `json:"size"`
}

const maxRecordSize = 1 << 20

// WriteRecord writes rec as the staging tree's artifact.json.
func (s *Staging) WriteRecord(rec *Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	fd, err := unix.Openat(s.dirFD, recordName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "openat", Path: recordName, Err: err}
	}
	f := os.NewFile(uintptr(fd), recordName)
	defer f.Close()
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Sync()
}

// validateArtifact reads artifact.json beneath the artifact directory dirFD
// and checks that it describes id (and manifestDigest when not empty), that
// rootfs is a directory and that every mount point is in place.
func validateArtifact(dirFD int, id, manifestDigest string) (*Record, error) {
	rec, err := readRecord(dirFD)
	if err != nil {
		return nil, err
	}
	switch {
	case rec.ID != id:
		return nil, fmt.Errorf("record names artifact %q (%w)", rec.ID, ErrCorrupt)
	case ArtifactID(rec.Source.ManifestDigest) != id:
		return nil, fmt.Errorf("record's manifest digest %q does not map to this ID (%w)", rec.Source.ManifestDigest, ErrCorrupt)
	case manifestDigest != "" && rec.Source.ManifestDigest != manifestDigest:
		return nil, fmt.Errorf("record's manifest digest %q, want %q (%w)", rec.Source.ManifestDigest, manifestDigest, ErrCorrupt)
	}
	rootfsFD, err := openBeneath(dirFD, rootfsName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("rootfs: %w (%w)", err, ErrCorrupt)
	}
	defer unix.Close(rootfsFD)
	if err := checkMountPoints(rootfsFD); err != nil {
		return nil, fmt.Errorf("%w (%w)", err, ErrCorrupt)
	}
	return rec, nil
}

func readRecord(dirFD int) (*Record, error) {
	fd, err := openBeneath(dirFD, recordName, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (%w)", recordName, err, ErrCorrupt)
	}
	f := os.NewFile(uintptr(fd), recordName)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%w)", recordName, ErrCorrupt)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", recordName, err)
	}
	if len(b) > maxRecordSize {
		return nil, fmt.Errorf("%s is larger than %d bytes (%w)", recordName, maxRecordSize, ErrCorrupt)
	}
	// The version decides how to read the rest: refuse a newer one before
	// interpreting anything else.
	var v struct {
		FormatVersion *int `json:"format_version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %v (%w)", recordName, err, ErrCorrupt)
	}
	switch {
	case v.FormatVersion == nil:
		return nil, fmt.Errorf("%s has no format_version (%w)", recordName, ErrCorrupt)
	case *v.FormatVersion > FormatVersion:
		return nil, fmt.Errorf("%s has format version %d, this Lazaret understands up to %d: upgrade Lazaret (%w)",
			recordName, *v.FormatVersion, FormatVersion, ErrNewerFormat)
	case *v.FormatVersion < 1:
		return nil, fmt.Errorf("%s has invalid format version %d (%w)", recordName, *v.FormatVersion, ErrCorrupt)
	}
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("%s: %v (%w)", recordName, err, ErrCorrupt)
	}
	if !ValidID(rec.ID) || rec.Source.ManifestDigest == "" || rec.Created.IsZero() {
		return nil, fmt.Errorf("%s is missing its id, manifest digest or creation time (%w)", recordName, ErrCorrupt)
	}
	return &rec, nil
}
