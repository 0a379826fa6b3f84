//go:build lazaret_debian

package imagebuild

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.podman.io/image/v5/image"
	ocilayout "go.podman.io/image/v5/oci/layout"
)

// Built only with -tags lazaret_debian (make test-debian): it builds the
// Debian image from the Debian mirror (network, 1–3 minutes). make test
// builds the same image through setup and uses it in the integration tier.

// TestBuildDebian needs the Debian mirror and about a minute; it runs only
// with LAZARET_TEST_DEBIAN=1.
func TestBuildDebian(t *testing.T) {
	dest := os.Getenv("LAZARET_TEST_DEBIAN_DEST")
	if dest == "" {
		dest = filepath.Join(t.TempDir(), "debian")
	}
	start := time.Now()
	res, err := Build(context.Background(), Options{Broker: testBroker(t), Kind: KindDebian, Dest: dest, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("debian build took %s: %+v", time.Since(start), res)
	ctx := context.Background()
	ref, err := ocilayout.ParseReference(dest + ":latest")
	if err != nil {
		t.Fatal(err)
	}
	src, err := ref.NewImageSource(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	img, err := image.FromUnparsedImage(ctx, nil, image.UnparsedInstance(src, nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(img.LayerInfos()); n != 1 {
		t.Fatalf("%d layers", n)
	}
	t.Logf("layer size %d bytes", img.LayerInfos()[0].Size)
}
