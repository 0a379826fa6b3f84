package anchor

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// upper creates <root>/anchors/<name>/upper and returns it.
func testUpper(t *testing.T, root, guest string) string {
	t.Helper()
	n, err := Name(guest)
	if err != nil {
		t.Fatal(err)
	}
	u := filepath.Join(root, Dir, n, upperName)
	if err := os.MkdirAll(u, 0o755); err != nil {
		t.Fatal(err)
	}
	return u
}

func identity(id uint32) (uint32, bool) { return id, id != 65534 }

type entry struct {
	Type     byte
	Mode     int64
	UID, GID int
	Link     string
	Body     string
}

func readLayer(t *testing.T, b []byte) (map[string]entry, []string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	got := map[string]entry{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got, order
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = entry{h.Typeflag, h.Mode, h.Uid, h.Gid, h.Linkname, string(body)}
		order = append(order, h.Name)
	}
}

func TestExportLayer(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" {
			t.Skip("LAZARET_ALLOW_SKIP=1: needs root (whiteouts are device nodes, owners are changed)")
		}
		t.Fatal("needs root (whiteouts are device nodes, owners are changed); run unit tests as root (make unit)")
	}
	root := t.TempDir()
	usr := testUpper(t, root, "/usr")
	vl := testUpper(t, root, "/var/lib")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(usr, "local/bin"), 0o755))
	must(os.WriteFile(filepath.Join(usr, "local/bin/tool"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(usr, "local/bin/tool"), 0o4755|os.ModeSetuid))
	must(unix.Chmod(filepath.Join(usr, "local/bin/tool"), 0o4755))
	must(os.Link(filepath.Join(usr, "local/bin/tool"), filepath.Join(usr, "local/bin/tool2")))
	must(os.Symlink("tool", filepath.Join(usr, "local/bin/t")))
	must(os.MkdirAll(filepath.Join(usr, "share/doc"), 0o755))
	must(unix.Mknod(filepath.Join(usr, "share/gone"), unix.S_IFCHR, 0))     // whiteout
	must(unix.Mknod(filepath.Join(usr, "share/null"), unix.S_IFCHR, 0x103)) // a device: left out
	must(unix.Setxattr(filepath.Join(usr, "share/doc"), "user.overlay.opaque", []byte("y"), 0))
	must(os.WriteFile(filepath.Join(vl, "owned"), []byte("x"), 0o640))
	must(os.Chown(filepath.Join(vl, "owned"), 1000, 100))

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	st, err := ExportLayer(root, tw, identity)
	must(err)
	must(tw.Close())
	got, order := readLayer(t, buf.Bytes())
	want := map[string]entry{
		"usr/":                       {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/local/":                 {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/local/bin/":             {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/local/bin/t":            {tar.TypeSymlink, 0o777, 0, 0, "tool", ""},
		"usr/local/bin/tool":         {tar.TypeReg, 0o755, 0, 0, "", "#!/bin/sh\n"},
		"usr/local/bin/tool2":        {tar.TypeLink, 0o755, 0, 0, "usr/local/bin/tool", ""},
		"usr/share/":                 {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/share/doc/":             {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/share/doc/.wh..wh..opq": {tar.TypeReg, 0o644, 0, 0, "", ""},
		"usr/share/.wh.gone":         {tar.TypeReg, 0o644, 0, 0, "", ""},
		"var/lib/":                   {tar.TypeDir, 0o755, 0, 0, "", ""},
		"var/lib/owned":              {tar.TypeReg, 0o640, 1000, 100, "", "x"},
	}
	if !reflect.DeepEqual(got, want) {
		for k, v := range got {
			if want[k] != v {
				t.Errorf("%s: got %+v want %+v", k, v, want[k])
			}
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				t.Errorf("%s missing", k)
			}
		}
	}
	if order[0] != "usr/" || order[len(order)-1] != "var/lib/owned" {
		t.Errorf("order %q", order)
	}
	if st.Anchors != 2 || st.Whiteouts != 1 || st.Opaque != 1 || st.Skipped != 1 || st.SetIDDropped != 1 || st.Hardlinks != 1 || st.Symlinks != 1 || st.Files != 2 {
		t.Errorf("stats %+v", st)
	}

	// A foreign owner refuses the export.
	must(os.Chown(filepath.Join(vl, "owned"), 65534, 100))
	_, err = ExportLayer(root, tar.NewWriter(io.Discard), identity)
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("foreign owner: %v", err)
	}
}

func TestExportLayerNoAnchors(t *testing.T) {
	var buf bytes.Buffer
	st, err := ExportLayer(t.TempDir(), tar.NewWriter(&buf), identity)
	if err != nil || st.Anchors != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}
