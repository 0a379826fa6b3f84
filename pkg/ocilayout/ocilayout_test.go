package ocilayout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/oci/layout"
)

// blob writes b into dir's blob store and returns its digest.
func blob(t *testing.T, dir string, b []byte) string {
	t.Helper()
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	p := filepath.Join(dir, "blobs", "sha256", h)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + h
}

// imageManifest writes a manifest (of a distinct, made-up config) of the
// given media type and returns its index entry.
func imageManifest(t *testing.T, dir, mediaType, tag, seed string) descriptor {
	t.Helper()
	cfg := blob(t, dir, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"seed":"`+seed+`"}`))
	cfgType := "application/vnd.oci.image.config.v1+json"
	if mediaType == mediaTypeDockerManifest {
		cfgType = "application/vnd.docker.container.image.v1+json"
	}
	m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":%q,"digest":%q,"size":10},"layers":[]}`, mediaType, cfgType, cfg)
	d := descriptor{MediaType: mediaType, Digest: blob(t, dir, []byte(m)), Size: int64(len(m))}
	if tag != "" {
		d.Annotations = map[string]string{refNameAnnotation: tag}
	}
	return d
}

func writeIndex(t *testing.T, dir string, entries ...descriptor) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// libraryDigest is the manifest digest the image library resolves ref to
// (what the preparer identifies the artifact by).
func libraryDigest(t *testing.T, ref string) (string, error) {
	t.Helper()
	r, err := layout.ParseReference(strings.TrimPrefix(ref, "oci:"))
	if err != nil {
		return "", err
	}
	src, err := r.NewImageSource(context.Background(), nil)
	if err != nil {
		return "", err
	}
	defer src.Close()
	mb, _, err := image.UnparsedInstance(src, nil).Manifest(context.Background())
	if err != nil {
		return "", err
	}
	d, err := manifest.Digest(mb)
	return d.String(), err
}

// TestManifestDigestAgreesWithTheImageLibrary: every reference this package
// resolves, it resolves to the digest the image library's oci transport
// gives (the artifact the preparer would name); every other reference is
// ErrUnresolved, never a different image.
func TestManifestDigestAgreesWithTheImageLibrary(t *testing.T) {
	single := t.TempDir()
	latest := imageManifest(t, single, mediaTypeOCIManifest, "latest", "a")
	writeIndex(t, single, latest)

	multi := t.TempDir()
	m1 := imageManifest(t, multi, mediaTypeOCIManifest, "latest", "b")
	m2 := imageManifest(t, multi, mediaTypeDockerManifest, "other", "c")
	odd := imageManifest(t, multi, mediaTypeOCIManifest, "shadowed", "d")
	odd.MediaType = "application/vnd.example.unknown+json" // the transport skips it
	m3 := imageManifest(t, multi, mediaTypeOCIManifest, "shadowed", "e")
	nested := t.TempDir()
	n1 := imageManifest(t, nested, mediaTypeOCIManifest, "", "f")
	list := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":%q,"digest":%q,"size":%d,"platform":{"architecture":"amd64","os":"linux"}}]}`, n1.MediaType, n1.Digest, n1.Size))
	listDesc := descriptor{MediaType: "application/vnd.oci.image.index.v1+json", Digest: blob(t, nested, list), Size: int64(len(list)), Annotations: map[string]string{refNameAnnotation: "latest"}}
	writeIndex(t, nested, listDesc)
	writeIndex(t, multi, m1, m2, odd, m3)

	corrupt := t.TempDir()
	c := imageManifest(t, corrupt, mediaTypeOCIManifest, "latest", "g")
	writeIndex(t, corrupt, c)
	if err := os.WriteFile(filepath.Join(corrupt, "blobs", "sha256", strings.TrimPrefix(c.Digest, "sha256:")), []byte(`{"schemaVersion":2}`), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		ref  string
		want string // "" when unresolved
	}{
		{"oci:" + single + ":latest", latest.Digest},
		{"oci:" + single, latest.Digest},
		{"oci:" + multi + ":latest", m1.Digest},
		{"oci:" + multi + ":other", m2.Digest},
		{"oci:" + multi + ":shadowed", m3.Digest},
		{"oci:" + multi, ""},                   // several images, no tag
		{"oci:" + multi + ":missing", ""},      // no such tag
		{"oci:" + single + ":@0", ""},          // a source index
		{"oci:" + nested + ":latest", ""},      // an image index: the preparer picks the platform
		{"oci:" + corrupt + ":latest", ""},     // bytes that do not match their digest
		{"oci:" + t.TempDir() + ":latest", ""}, // no index.json
		{"oci:relative/layout:latest", ""},
		{"oci:" + single + "/../" + filepath.Base(single) + ":latest", ""}, // not clean
		{"docker://registry.example/image:1", ""},
	} {
		got, err := ManifestDigest(tc.ref)
		if tc.want == "" {
			if !errors.Is(err, ErrUnresolved) {
				t.Errorf("%s: got %q, %v; want ErrUnresolved", tc.ref, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %s", tc.ref, got, err, tc.want)
			continue
		}
		lib, err := libraryDigest(t, tc.ref)
		if err != nil || lib != got {
			t.Errorf("%s: the image library resolves %q, %v; this package %q", tc.ref, lib, err, got)
		}
	}
}

// TestReuseDigest: a registry reference is reused without the image
// library only when it pins a canonical sha256 digest; a tag, or a digest
// in another form, is the preparer's; an oci: reference is package
// ocilayout's.
func TestReuseDigest(t *testing.T) {
	d := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for ref, want := range map[string]string{
		"docker://docker.io/library/debian@" + d:                               d,
		"docker://registry.example:5000/a/b:12@" + d:                           d,
		"docker://docker.io/library/debian:12":                                 "",
		"docker://docker.io/library/debian@sha256:" + strings.Repeat("AB", 32): "",
		"docker://docker.io/library/debian@sha512:" + strings.Repeat("ab", 64): "",
		"docker://docker.io/library/debian@" + d[:70]:                          "",
		"oci:" + t.TempDir() + ":latest":                                       "", // no layout there
	} {
		got, err := ReuseDigest(ref)
		if want == "" {
			if !errors.Is(err, ErrUnresolved) {
				t.Errorf("%s: %q, %v; want ErrUnresolved", ref, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", ref, got, err, want)
		}
	}
}
