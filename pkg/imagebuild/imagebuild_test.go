package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/proc/proctest"
	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
)

func TestKinds(t *testing.T) {
	got := Kinds()
	if len(got) != 2 || got[0] != KindBusybox || got[1] != KindDebian {
		t.Fatalf("Kinds() = %v", got)
	}
	got[0] = "mutated"
	if Kinds()[0] != KindBusybox {
		t.Fatal("Kinds returns shared slice")
	}
}

func TestUnknownKind(t *testing.T) {
	_, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: "alpine", Dest: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `"alpine"`) || !strings.Contains(err.Error(), "busybox, debian") {
		t.Fatalf("err = %v, want unknown kind naming valid kinds", err)
	}
}

// layerEntry is what a test learns about one tar entry.
type layerEntry struct {
	hdr  *tar.Header
	body []byte
}

// readBack opens the layout with go.podman.io/image and returns the
// verified manifest digest, the config and the decoded single layer.
func readBack(t *testing.T, dest, tag string) (digest.Digest, *v1.Image, map[string]layerEntry) {
	t.Helper()
	ctx := context.Background()
	ref, err := ocilayout.ParseReference(dest + ":" + tag)
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
	mb, mt, err := img.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if mt != v1.MediaTypeImageManifest {
		t.Fatalf("manifest type %s", mt)
	}
	md, err := manifest.Digest(mb)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.OCIConfig(ctx) // verifies the config digest
	if err != nil {
		t.Fatal(err)
	}
	layers := img.LayerInfos()
	if len(layers) != 1 {
		t.Fatalf("%d layers", len(layers))
	}
	rc, _, err := src.GetBlob(ctx, layers[0], none.NoCache)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	blob, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if got := digest.FromBytes(blob); got != layers[0].Digest {
		t.Fatalf("layer digest %s, manifest says %s", got, layers[0].Digest)
	}
	gz, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() || blob[4]|blob[5]|blob[6]|blob[7] != 0 {
		t.Errorf("gzip header name=%q mtime=%v, want empty", gz.Name, gz.ModTime)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	if got := digest.FromBytes(raw); got != cfg.RootFS.DiffIDs[0] {
		t.Fatalf("diff id %s, config says %s", got, cfg.RootFS.DiffIDs[0])
	}
	entries := map[string]layerEntry{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		entries[strings.TrimSuffix(h.Name, "/")] = layerEntry{h, b}
	}
	return md, cfg, entries
}

func TestBuildBusybox(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "images", "busybox")
	start := time.Now()
	var progress bytes.Buffer
	res, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: KindBusybox, Dest: dest, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("busybox build took %s", time.Since(start))
	if res.Dest != dest || res.Tag != DefaultTag || !strings.HasPrefix(res.ManifestDigest, "sha256:") {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(progress.String(), "published") {
		t.Errorf("progress = %q", progress.String())
	}
	md, cfg, entries := readBack(t, dest, DefaultTag)
	if md.String() != res.ManifestDigest {
		t.Fatalf("manifest digest %s, Build said %s", md, res.ManifestDigest)
	}
	if cfg.Architecture != runtime.GOARCH || cfg.OS != "linux" {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if len(cfg.Config.Cmd) == 0 || len(cfg.Config.Env) == 0 || cfg.Config.WorkingDir == "" {
		t.Errorf("config %+v", cfg.Config)
	}
	want := map[string]struct {
		typ  byte
		mode int64
		link string
	}{
		".":           {tar.TypeDir, 0o755, ""},
		"bin/busybox": {tar.TypeReg, 0o755, ""},
		"bin/sh":      {tar.TypeSymlink, 0o777, "busybox"},
		"bin/ls":      {tar.TypeSymlink, 0o777, "busybox"},
		"usr/bin/env": {tar.TypeSymlink, 0o777, "/bin/busybox"},
		"tmp":         {tar.TypeDir, 0o1777, ""},
		"root":        {tar.TypeDir, 0o700, ""},
		"proc":        {tar.TypeDir, 0o555, ""},
		"sys":         {tar.TypeDir, 0o555, ""},
		"dev":         {tar.TypeDir, 0o755, ""},
		"etc/passwd":  {tar.TypeReg, 0o644, ""},
		"etc/group":   {tar.TypeReg, 0o644, ""},
	}
	for name, w := range want {
		e, ok := entries[name]
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if e.hdr.Typeflag != w.typ || e.hdr.Mode != w.mode || e.hdr.Linkname != w.link {
			t.Errorf("%s: type %c mode %o link %q; want %c %o %q", name, e.hdr.Typeflag, e.hdr.Mode, e.hdr.Linkname, w.typ, w.mode, w.link)
		}
	}
	for name, e := range entries {
		if e.hdr.Uid != 0 || e.hdr.Gid != 0 {
			t.Errorf("%s owned by %d:%d", name, e.hdr.Uid, e.hdr.Gid)
		}
		if !e.hdr.ModTime.Equal(busyboxEpoch) {
			t.Errorf("%s mtime %v", name, e.hdr.ModTime)
		}
	}
	if !strings.HasPrefix(string(entries["etc/passwd"].body), "root:x:0:0:") {
		t.Errorf("passwd %q", entries["etc/passwd"].body)
	}
	// Every applet busybox lists has a /bin link.
	out, err := run("/bin/busybox", "--list")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(out) {
		if _, ok := entries["bin/"+a]; !ok && a != "busybox" {
			t.Errorf("no /bin/%s", a)
		}
	}
	// No staging directories left beside the layout.
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), ".*"))
	if len(left) != 0 {
		t.Errorf("leftovers: %v", left)
	}
	var blobBytes int64
	filepath.Walk(dest, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && fi.Mode().IsRegular() {
			blobBytes += fi.Size()
		}
		return nil
	})
	t.Logf("busybox layout %d bytes, %d tar entries", blobBytes, len(entries))
}

func run(name string, args ...string) (string, error) {
	out, err := osexec.Command(name, args...).Output()
	return string(out), err
}

func TestBuildBusyboxReproducible(t *testing.T) {
	dir := t.TempDir()
	a, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: KindBusybox, Dest: filepath.Join(dir, "a")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: KindBusybox, Dest: filepath.Join(dir, "b")})
	if err != nil {
		t.Fatal(err)
	}
	if a.ManifestDigest != b.ManifestDigest {
		t.Fatalf("two builds differ: %s vs %s", a.ManifestDigest, b.ManifestDigest)
	}
}

func TestRebuildReplacesAtomically(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "img")
	if _, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: KindBusybox, Dest: dest, Tag: "one"}); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: KindBusybox, Dest: dest, Tag: "two"}); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Error("layout directory was modified in place, want a new directory swapped in")
	}
	var idx v1.Index
	b, err := os.ReadFile(filepath.Join(dest, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations[v1.AnnotationRefName] != "two" {
		t.Fatalf("index %+v", idx.Manifests)
	}
	readBack(t, dest, "two")
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), ".*"))
	if len(left) != 0 {
		t.Errorf("leftovers: %v", left)
	}
}

func TestRefusesToReplaceForeignDirectory(t *testing.T) {
	dest := t.TempDir()
	if err := os.WriteFile(filepath.Join(dest, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(context.Background(), Options{Broker: proctest.SelfBroker(t), Kind: KindBusybox, Dest: dest})
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "precious")); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledBuildLeavesNothing(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "img")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := WriteLayout(ctx, dest, "latest", ImageConfig{}, strings.NewReader("not read"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dest))
	if len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestTailWriter(t *testing.T) {
	tw := &tailWriter{max: 2}
	io.WriteString(tw, "a\nb\nprogress 1%\rprogress 99%\nc")
	if got := tw.String(); got != "b\nprogress 99%\nc" {
		t.Fatalf("tail = %q", got)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
