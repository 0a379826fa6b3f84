// Package ocilayout resolves an `oci:PATH[:TAG]` image reference to the
// digest of the single-platform image manifest it names, reading the OCI
// image layout's index.json and that manifest's blob, without the image
// library (go.podman.io/image): the reuse check of a prepared lower (the
// Runtime Supervisor's lookup of the tree, the coordinator's verdict from
// the Storage Catalog: ReuseDigest) needs only that digest, and linking
// the image library into lazaret-rs or lazaret-hc would cost every cold
// start its initialisation.
//
// It follows the image library's oci layout transport for the references it
// accepts: PATH and TAG split at the first ':'; with a TAG, the first index
// entry whose org.opencontainers.image.ref.name annotation is TAG; without
// one, the index's only entry. It resolves less than that transport, never
// differently: a reference it does not resolve (a source index "@N", an
// entry that is itself an image index, a layout it cannot read, a manifest
// whose bytes do not match their digest) returns an error wrapping
// ErrUnresolved, and the caller hands the reference to the preparer
// (package prepare), which resolves it with the image library and reports
// what is wrong in its terms.
package ocilayout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnresolved marks a reference this package does not resolve (the
// preparer does).
var ErrUnresolved = errors.New("not resolved without the image library")

// Media types of a single-platform image manifest, as the image library's
// oci layout transport accepts them.
const (
	mediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	refNameAnnotation       = "org.opencontainers.image.ref.name"
)

// maxIndexBytes and maxManifestBytes bound what is read: an index or a
// manifest larger than this is not one a start reuses without the library.
const (
	maxIndexBytes    = 4 << 20
	maxManifestBytes = 4 << 20
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	Manifests     []descriptor `json:"manifests"`
}

// ReuseDigest is the manifest digest a start may reuse the prepared lower
// of without the image library: a local layout's (ManifestDigest), or the
// digest a registry reference pins (docker://NAME@sha256:HEX). A pinned
// digest that names a manifest list has no prepared lower of its own
// (artifacts are the platform's manifest's), so none is found and the
// preparer resolves it; a pinned single-platform manifest is reused
// without asking the registry, as the prepared lower is the content that
// digest names. Anything else wraps ErrUnresolved.
func ReuseDigest(ref string) (string, error) {
	if name, ok := strings.CutPrefix(ref, "docker://"); ok {
		if _, d, ok := strings.Cut(name, "@"); ok && ValidDigest(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s: a registry reference pins no sha256 digest (%w)", ref, ErrUnresolved)
	}
	return ManifestDigest(ref)
}

// ManifestDigest returns the digest ("sha256:" and 64 hex digits) of the
// image manifest ref names. ref is an `oci:` reference with an absolute,
// clean layout path (what a profile's image becomes).
func ManifestDigest(ref string) (string, error) {
	rest, ok := strings.CutPrefix(ref, "oci:")
	if !ok {
		return "", unresolved(ref, "not an oci: reference")
	}
	dir, tag, _ := strings.Cut(rest, ":")
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", unresolved(ref, "the layout path is not absolute and clean")
	}
	if strings.HasPrefix(tag, "@") {
		return "", unresolved(ref, "a source index")
	}
	b, err := readBounded(filepath.Join(dir, "index.json"), maxIndexBytes)
	if err != nil {
		return "", unresolved(ref, err.Error())
	}
	var idx index
	if err := json.Unmarshal(b, &idx); err != nil {
		return "", unresolved(ref, "index.json: "+err.Error())
	}
	if idx.SchemaVersion != 2 {
		return "", unresolved(ref, fmt.Sprintf("index.json schema version %d", idx.SchemaVersion))
	}
	d, err := pick(idx, tag)
	if err != nil {
		return "", unresolved(ref, err.Error())
	}
	if d.MediaType != mediaTypeOCIManifest && d.MediaType != mediaTypeDockerManifest {
		return "", unresolved(ref, "its index entry is a "+d.MediaType)
	}
	if !ValidDigest(d.Digest) {
		return "", unresolved(ref, fmt.Sprintf("digest %q is not sha256", d.Digest))
	}
	hexDigest := strings.TrimPrefix(d.Digest, "sha256:")
	m, err := readBounded(filepath.Join(dir, "blobs", "sha256", hexDigest), maxManifestBytes)
	if err != nil {
		return "", unresolved(ref, err.Error())
	}
	if d.Size > 0 && int64(len(m)) != d.Size {
		return "", unresolved(ref, fmt.Sprintf("manifest is %d bytes, its index entry says %d", len(m), d.Size))
	}
	sum := sha256.Sum256(m)
	if hex.EncodeToString(sum[:]) != hexDigest {
		return "", unresolved(ref, "manifest bytes do not match their digest")
	}
	return d.Digest, nil
}

// pick is the index entry tag names (the only entry without a tag).
func pick(idx index, tag string) (descriptor, error) {
	if tag == "" {
		if len(idx.Manifests) != 1 {
			return descriptor{}, fmt.Errorf("index.json lists %d images and the reference names no tag", len(idx.Manifests))
		}
		return idx.Manifests[0], nil
	}
	for _, d := range idx.Manifests {
		if d.Annotations[refNameAnnotation] != tag {
			continue
		}
		switch d.MediaType {
		case mediaTypeOCIManifest, mediaTypeDockerManifest,
			"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json":
			return d, nil // the transport's first match (an index is refused by the caller)
		}
	}
	return descriptor{}, fmt.Errorf("no image manifest tagged %q", tag)
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// ValidDigest reports whether d is a sha256 digest in its canonical form,
// "sha256:" and 64 lower-case hex digits (the form of every prepared
// lower's manifest digest).
func ValidDigest(d string) bool {
	s, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func unresolved(ref, why string) error {
	return fmt.Errorf("%s: %s (%w)", ref, why, ErrUnresolved)
}
