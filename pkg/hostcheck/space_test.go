package hostcheck

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestStartSpace(t *testing.T) {
	free := map[string]uint64{"/s": 40 << 20, "/r": 8 << 20}
	statfs := func(p string) (FS, error) {
		f, ok := free[p]
		if !ok {
			return FS{}, os.ErrNotExist
		}
		return FS{FreeBytes: f}, nil
	}
	if err := StartSpace(statfs, "/s", "/r"); err != nil {
		t.Fatalf("enough space refused: %v", err)
	}
	free["/s"] = 900 << 10
	err := StartSpace(statfs, "/s", "/r")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("a full Storage Root: %v", err)
	}
	for _, want := range []string{"Storage Root /s", "900 KiB free", "32 MiB", "lazaret state reset", "lazaret rm --older-than 30d", "lazaret gc", "XDG_STATE_HOME"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	free["/s"], free["/r"] = 1<<30, 1<<20
	if err := StartSpace(statfs, "/s", "/r"); err == nil || !strings.Contains(err.Error(), "runtime root /r") || !strings.Contains(err.Error(), "XDG_RUNTIME_DIR") {
		t.Errorf("a full runtime root: %v", err)
	}
	// A filesystem that cannot be inspected is left to the start.
	if err := StartSpace(statfs, "/missing", "/s"); err != nil {
		t.Errorf("uninspectable: %v", err)
	}
	if fs, err := StatfsNearest(t.TempDir() + "/not/yet"); err != nil || fs.FreeBytes == 0 {
		t.Errorf("StatfsNearest of a path to be created: %+v %v", fs, err)
	}
}

func TestLowSpaceNote(t *testing.T) {
	statfs := func(free uint64) func(string) (FS, error) {
		return func(string) (FS, error) { return FS{FreeBytes: free}, nil }
	}
	if n := LowSpaceNote(statfs(1<<30), "/s"); n != "" {
		t.Errorf("a roomy filesystem: %q", n)
	}
	n := LowSpaceNote(statfs(0), "/s")
	for _, want := range []string{"Storage Root /s", "0 B free", "probably why", "lazaret ls"} {
		if !strings.Contains(n, want) {
			t.Errorf("note lacks %q: %s", want, n)
		}
	}
}
