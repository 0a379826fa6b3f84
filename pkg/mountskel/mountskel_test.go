package mountskel

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestNeededAndBuild(t *testing.T) {
	root := t.TempDir()
	lower := filepath.Join(root, "lower")
	for _, d := range []string{"home", "tmp", "workspace", "etc"} {
		os.MkdirAll(filepath.Join(lower, d), 0o755)
	}
	os.Chmod(filepath.Join(lower, "tmp"), os.ModeSticky|0o777)
	os.Symlink("home", filepath.Join(lower, "lnk"))
	os.WriteFile(filepath.Join(lower, "etc", "hosts"), nil, 0o644)
	file := filepath.Join(root, "src-file")
	os.WriteFile(file, []byte("x"), 0o644)
	anchors := filepath.Join(root, "bundle", "anchors")
	sp := &specs.Spec{Mounts: []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/workspace", Type: "bind", Source: root},
		{Destination: "/home", Type: "bind", Source: filepath.Join(anchors, "home")},
		{Destination: "/workspace/.git", Type: "bind", Source: root},
		{Destination: "/etc/hosts", Type: "bind", Source: file},
		{Destination: "/srv/data/file", Type: "bind", Source: file},
		{Destination: "/home/dev/proj/.git", Type: "bind", Source: root},
		{Destination: "/home/dev/proj/.git/hooks", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/home/dev/proj/.git/config", Type: "bind", Source: file},
		{Destination: "/tmp/a/b", Type: "bind", Source: root},
	}}
	pts, err := Needed(sp, lower, anchors)
	if err != nil {
		t.Fatal(err)
	}
	want := []Point{{Path: "/srv/data/file", File: true}, {Path: "/home/dev/proj/.git"}, {Path: "/tmp/a/b"}}
	if !reflect.DeepEqual(pts, want) {
		t.Fatalf("needed:\n got %+v\nwant %+v", pts, want)
	}
	skel := filepath.Join(root, "skel")
	if err := Build(skel, lower, pts); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"tmp": os.ModeDir | os.ModeSticky | 0o777, "home": os.ModeDir | 0o755, "home/dev/proj/.git": os.ModeDir | 0o755, "srv/data/file": 0o644, "tmp/a/b": os.ModeDir | 0o755} {
		st, err := os.Lstat(filepath.Join(skel, p))
		if err != nil || st.Mode() != mode {
			t.Errorf("skeleton %s: %v %v (want %v)", p, st.Mode(), err, mode)
		}
	}
	if _, err := os.Lstat(filepath.Join(skel, "workspace")); err == nil {
		t.Errorf("skeleton holds a path nobody needs")
	}
	// A destination through a symlink in the image is refused.
	sp.Mounts = append(sp.Mounts, specs.Mount{Destination: "/lnk/x", Type: "bind", Source: root})
	if _, err := Needed(sp, lower, anchors); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("mount point through a symlink: %v", err)
	}
}
