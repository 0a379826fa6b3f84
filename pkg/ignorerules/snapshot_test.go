package ignorerules

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// TestSnapshotRoundTrip: what WriteSnapshot writes (0600), ReadSnapshot
// reads back, contents byte for byte (binary included), none as none; a
// snapshot of another version, a directory that is not a clean relative
// path, or one named twice is refused as corrupt, naming the file.
func TestSnapshotRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.json")
	files := []Gitignore{{Dir: "", Content: []byte("*.o\n")}, {Dir: "a/b", Content: []byte("x\x00\xff\n")}}
	if err := WriteSnapshot(p, files); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, mode %v", err, fi.Mode())
	}
	got, err := ReadSnapshot(p)
	if err != nil || !reflect.DeepEqual(got, files) {
		t.Fatalf("read back %q, %v; want %q", got, err, files)
	}
	if err := WriteSnapshot(p, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSnapshot(p); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty snapshot read back as %#v, %v", got, err)
	}
	for name, doc := range map[string]string{
		"newer":     `{"version":2,"gitignores":[]}`,
		"absolute":  `{"version":1,"gitignores":[{"dir":"/etc","content":""}]}`,
		"dot-dot":   `{"version":1,"gitignores":[{"dir":"a/../../b","content":""}]}`,
		"dot":       `{"version":1,"gitignores":[{"dir":".","content":""}]}`,
		"twice":     `{"version":1,"gitignores":[{"dir":"a","content":""},{"dir":"a","content":""}]}`,
		"malformed": `{"version":1,"gitignores":[`,
	} {
		os.WriteFile(p, []byte(doc), 0o600)
		if _, err := ReadSnapshot(p); !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want a corrupt-snapshot error naming %s", name, err, p)
		}
	}
}

// TestAddGitignoresIsTheWalk: a snapshot of the files the walk reads,
// added with AddGitignores, decides as LoadGitignores.
func TestAddGitignoresIsTheWalk(t *testing.T) {
	ws := t.TempDir()
	put := func(rel, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(ws, rel)), 0o755)
		os.WriteFile(filepath.Join(ws, rel), []byte(s), 0o644)
	}
	put(".gitignore", "*.log\nbuild/\n")
	put("a/.gitignore", "!keep.log\n*.tmp\n")
	put("a/b/.gitignore", "deep/\n")
	walked := NewRules()
	if err := walked.LoadGitignores(ws); err != nil {
		t.Fatal(err)
	}
	snap := NewRules()
	if err := snap.AddGitignores([]Gitignore{{"", []byte("*.log\nbuild/\n")}, {"a", []byte("!keep.log\n*.tmp\n")}, {"a/b", []byte("deep/\n")}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		rel string
		dir bool
	}{{"x.log", false}, {"a/keep.log", false}, {"a/x.tmp", false}, {"a/b/deep", true}, {"deep", true}, {"build", true}, {"a/build", true}} {
		if got, want := snap.Ignored(p.rel, p.dir), walked.Ignored(p.rel, p.dir); got != want {
			t.Errorf("Ignored(%q): snapshot %v, walk %v", p.rel, got, want)
		}
	}
}
