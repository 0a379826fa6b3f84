package recipe

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/imagebuild"
)

type fakeSandbox struct {
	fail                      string // the step that exits 3
	ran                       []string
	started, stopped, removed bool
	rx                        int64
}

func (f *fakeSandbox) Start(context.Context) error { f.started = true; return nil }
func (f *fakeSandbox) Run(_ context.Context, step string, out io.Writer) (int, error) {
	f.ran = append(f.ran, step)
	f.rx += 1 << 20
	io.WriteString(out, "output of "+step+"\nno newline")
	if step == f.fail {
		return 3, nil
	}
	return 0, nil
}
func (f *fakeSandbox) Received(context.Context) int64 { return f.rx }
func (f *fakeSandbox) Stop(context.Context) error     { f.stopped = true; return nil }
func (f *fakeSandbox) Export(_ context.Context, w io.Writer) (anchor.LayerStats, error) {
	tw := tar.NewWriter(w)
	tw.WriteHeader(&tar.Header{Name: "usr/bin/tool", Mode: 0o755, Size: 3, Typeflag: tar.TypeReg})
	tw.Write([]byte("new"))
	return anchor.LayerStats{Files: 1, Bytes: 3}, tw.Close()
}
func (f *fakeSandbox) Remove(context.Context) error { f.removed = true; return nil }

func base(t *testing.T) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images", "debian")
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "etc/os-release", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	res, err := imagebuild.WriteLayout(context.Background(), dir, "latest", imagebuild.ImageConfig{}, &b)
	if err != nil {
		t.Fatal(err)
	}
	return dir, res.ManifestDigest
}

func testRecipe(steps ...string) *config.Recipe {
	return &config.Recipe{Base: "debian", Run: steps, Digest: config.RecipeDigest("debian", steps)}
}

func TestBuildPublishesAndIsCurrent(t *testing.T) {
	baseDir, md := base(t)
	r := testRecipe("echo one", "echo two")
	layout := filepath.Join(filepath.Dir(baseDir), r.StoreName())
	sb := &fakeSandbox{}
	var out bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	b := &Build{Profile: "p", Recipe: r, Base: baseDir, BaseTag: "latest", BaseManifest: md, Layout: layout, Sandbox: sb, Out: &out, Now: now}
	rec, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !sb.started || !sb.stopped || !sb.removed || strings.Join(sb.ran, ";") != "echo one;echo two" {
		t.Fatalf("sandbox %+v", sb)
	}
	for _, want := range []string{"[1/2] echo one", "  | output of echo one\n  | no newline\n", "[2/2] done in 1s, 1.0 MiB downloaded", "built the image of profile p"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, out.String())
		}
	}
	if rec.Layer.Files != 1 || rec.Downloaded != 2<<20 || rec.Digest != r.Digest {
		t.Errorf("record %+v", rec)
	}
	img, err := imagebuild.ReadImage(layout, "latest")
	if err != nil || len(img.Manifest.Layers) != 2 {
		t.Fatalf("image %v %+v", err, img)
	}
	ok, got, err := Current(layout, r, md)
	if err != nil || !ok || got.BaseManifest != md || got.Seconds <= 0 {
		t.Fatalf("current %v %+v %v", ok, got, err)
	}
	// A changed step or a changed base is not current.
	if ok, _, _ := Current(layout, testRecipe("echo one", "echo 2"), md); ok {
		t.Error("changed step is current")
	}
	if ok, _, _ := Current(layout, r, "sha256:other"); ok {
		t.Error("changed base is current")
	}
	// A newer record is refused.
	os.WriteFile(filepath.Join(layout, RecordFile), []byte(`{"version":99}`), 0o644)
	if _, _, err := Current(layout, r, md); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("newer record: %v", err)
	}
}

func TestFailedStepLeavesNoImage(t *testing.T) {
	baseDir, md := base(t)
	r := testRecipe("true", "false", "never")
	layout := filepath.Join(filepath.Dir(baseDir), r.StoreName())
	sb := &fakeSandbox{fail: "false"}
	var out bytes.Buffer
	b := &Build{Profile: "p", Recipe: r, Base: baseDir, BaseTag: "latest", BaseManifest: md, Layout: layout, Sandbox: sb, Out: &out, Now: time.Now}
	_, err := b.Run(context.Background())
	var se *StepError
	if !errors.As(err, &se) || se.Index != 2 || se.Code != 3 || !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(out.String(), "output of false") || !strings.Contains(out.String(), "[2/3] failed with exit status 3") {
		t.Errorf("output:\n%s", out.String())
	}
	if len(sb.ran) != 2 || sb.stopped || !sb.removed {
		t.Errorf("sandbox %+v", sb)
	}
	if _, err := os.Stat(layout); !os.IsNotExist(err) {
		t.Errorf("image left: %v", err)
	}
	if ok, _, _ := Current(layout, r, md); ok {
		t.Error("current after failure")
	}
}

func TestLock(t *testing.T) {
	layout := filepath.Join(t.TempDir(), "recipe-x")
	f, err := Lock(context.Background(), layout)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, layout); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock: %v", err)
	}
	f.Close()
	g, err := Lock(context.Background(), layout)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
}
