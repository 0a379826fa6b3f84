package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/image"
	ocilayout "go.podman.io/image/v5/oci/layout"
)

func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return &b
}

func TestAppendLayer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	cfg := ImageConfig{Env: []string{"PATH=/usr/bin:/bin"}, Cmd: []string{"sh"}}
	bres, err := WriteLayout(ctx, base, "latest", cfg, tarOf(t, map[string]string{"etc/os-release": "base\n"}))
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "recipe-x")
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	res, err := AppendLayer(ctx, Derived{
		Base: base, BaseTag: "latest", Dest: dest, Tag: "latest",
		Layer: tarOf(t, map[string]string{"usr/bin/tool": "new\n", "etc/.wh.os-release": ""}), CreatedBy: "sh -c true", Created: when,
		Files: func() (map[string][]byte, error) {
			return map[string][]byte{"lazaret-recipe.json": []byte(`{"version":1}`)}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ManifestDigest == bres.ManifestDigest {
		t.Fatal("same manifest")
	}
	// go.podman.io/image reads it back with every digest verified.
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
	oc, err := img.OCIConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.LayerInfos()) != 2 || len(oc.RootFS.DiffIDs) != 2 || strings.Join(oc.Config.Env, ",") != "PATH=/usr/bin:/bin" || oc.Created == nil || !oc.Created.Equal(when) {
		t.Fatalf("config %+v layers %d", oc, len(img.LayerInfos()))
	}
	if h := oc.History[len(oc.History)-1]; h.CreatedBy != "sh -c true" {
		t.Fatalf("history %+v", oc.History)
	}
	got, err := ReadImage(dest, "")
	if err != nil || got.ManifestDigest.String() != res.ManifestDigest {
		t.Fatalf("ReadImage %v %s", err, got.ManifestDigest)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "lazaret-recipe.json")); string(b) != `{"version":1}` {
		t.Fatalf("record %q", b)
	}
	// The base layer blob is shared (hard link), not rewritten.
	bl := got.Manifest.Layers[0].Digest
	a, _ := os.Stat(filepath.Join(base, v1.ImageBlobsDir, "sha256", bl.Encoded()))
	b, _ := os.Stat(filepath.Join(dest, v1.ImageBlobsDir, "sha256", bl.Encoded()))
	if !os.SameFile(a, b) {
		t.Error("base layer copied instead of linked")
	}
	// A failing layer leaves no image and no staging directory.
	_, err = AppendLayer(ctx, Derived{Base: base, Dest: filepath.Join(dir, "broken"), Tag: "latest", Layer: &failingReader{}})
	if err == nil {
		t.Fatal("failing layer published")
	}
	// A bad extra file name is refused.
	if _, err := AppendLayer(ctx, Derived{Base: base, Dest: filepath.Join(dir, "y"), Tag: "latest", Layer: tarOf(t, nil), Files: func() (map[string][]byte, error) { return map[string][]byte{"../x": nil}, nil }}); err == nil {
		t.Fatal("bad file name accepted")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "base" && e.Name() != "recipe-x" {
			t.Errorf("left %s", e.Name())
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, os.ErrClosed }
