package prepare

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayoutManifestDigest: the image-free reading of an oci: layout
// yields the manifest digest the image library resolves (hence the same
// artifact), and declines whatever it does not resolve exactly.
func TestLayoutManifestDigest(t *testing.T) {
	ref := busyboxRef(t)
	img, err := resolve(context.Background(), ref, false)
	if err != nil {
		t.Fatal(err)
	}
	defer img.close()
	got, ok := layoutManifestDigest(ref)
	if !ok || got != img.source.ManifestDigest {
		t.Fatalf("layoutManifestDigest(%s) = %q, %v; the image library resolves %s", ref, got, ok, img.source.ManifestDigest)
	}
	if got, ok := layoutManifestDigest(strings.TrimSuffix(ref, ":latest")); !ok || got != img.source.ManifestDigest {
		t.Errorf("without a tag (one manifest): %q, %v", got, ok)
	}

	// A copy of the layout whose manifest blob was altered is declined.
	dir := strings.TrimSuffix(strings.TrimPrefix(ref, "oci:"), ":latest")
	bad := filepath.Join(t.TempDir(), "layout")
	if err := os.MkdirAll(filepath.Join(bad, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	hexDigest := strings.TrimPrefix(img.source.ManifestDigest, "sha256:")
	mb, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "blobs", "sha256", hexDigest), append(mb, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"oci:" + bad + ":latest", ref + "x", "oci:relative/path:latest", "docker://example.org/x:1", "oci:" + filepath.Join(bad, "missing")} {
		if got, ok := layoutManifestDigest(r); ok {
			t.Errorf("layoutManifestDigest(%s) = %q, want declined", r, got)
		}
	}
}
