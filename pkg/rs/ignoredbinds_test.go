package rs

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// TestGivenRecord: the record of bound ignored directories round-trips;
// none reads as nothing to return; a damaged one returns everything; a
// newer format is refused with the fix.
func TestGivenRecord(t *testing.T) {
	root := t.TempDir()
	if rels, all, err := readGiven(root); rels != nil || all || err != nil {
		t.Fatalf("no record: %v %v %v", rels, all, err)
	}
	if err := writeGiven(root, []string{"node_modules", "app/build"}); err != nil {
		t.Fatal(err)
	}
	rels, all, err := readGiven(root)
	if err != nil || all || !reflect.DeepEqual(rels, []string{"node_modules", "app/build"}) {
		t.Fatalf("round trip: %v %v %v", rels, all, err)
	}
	for name, body := range map[string]string{
		"torn":        "lazaret-ignored-binds-gi",
		"empty":       "",
		"bad path":    givenMagic + " 1\n../etc\n",
		"other magic": "something 1\nnode_modules\n",
	} {
		os.WriteFile(filepath.Join(root, GivenFile), []byte(body), 0o600)
		if rels, all, err := readGiven(root); rels != nil || !all || err != nil {
			t.Errorf("%s: %v %v %v, want everything returned", name, rels, all, err)
		}
	}
	os.WriteFile(filepath.Join(root, GivenFile), []byte(givenMagic+" 2\nnode_modules\n"), 0o600)
	if _, _, err := readGiven(root); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "newer Lazaret") {
		t.Errorf("newer record: %v", err)
	}
	if err := removeGiven(root); err != nil {
		t.Fatal(err)
	}
	if err := removeGiven(root); err != nil {
		t.Errorf("removing no record: %v", err)
	}
}

// TestReturnIgnoredBinds: what other ids own beneath a bound directory,
// and the directory, go back to the developer (0 here); a symlink is
// changed itself, never followed; a path reset meanwhile is skipped; the
// record goes. After a crash the next supervisor does the same for the
// recorded paths before anything else.
func TestReturnIgnoredBinds(t *testing.T) {
	needRoot(t)
	storage := t.TempDir()
	id := "0123456789abcdef0123456789abcdef"
	root := filepath.Join(storage, "domains", id)
	state := filepath.Join(root, ocispec.IgnoredStateDir)
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("x"), 0o644)
	os.Chown(outside, 4242, 4242)
	nm := filepath.Join(state, "node_modules")
	for _, d := range []string{"node_modules/a/b", "app/build", "other"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"node_modules/a/b/f", "node_modules/a/g", "app/build/o", "other/kept"}
	for _, f := range files {
		os.WriteFile(filepath.Join(state, f), []byte("x"), 0o600)
		os.Chown(filepath.Join(state, f), 101000, 101001)
	}
	os.Symlink(outside, filepath.Join(nm, "link"))
	os.Lchown(filepath.Join(nm, "link"), 4243, 4243)
	os.Chown(filepath.Join(nm, "a"), 5000, 0)
	os.Chown(nm, 1000, 1000)
	owner := func(p string) (uint32, uint32) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	s := &supervisor{log: slog.New(slog.DiscardHandler), start: &lv1.StartSandbox{StorageRoot: storage, DomainId: id}}
	s.given = []string{"node_modules", "gone"}
	if err := writeGiven(root, s.given); err != nil {
		t.Fatal(err)
	}
	s.returnIgnoredBinds()
	for _, p := range []string{"node_modules", "node_modules/a", "node_modules/a/b", "node_modules/a/b/f", "node_modules/a/g", "node_modules/link"} {
		if u, g := owner(filepath.Join(state, p)); u != 0 || g != 0 {
			t.Errorf("%s belongs to %d:%d after the return", p, u, g)
		}
	}
	if u, _ := owner(outside); u != 4242 {
		t.Errorf("the symlink was followed: its target belongs to %d", u)
	}
	if u, _ := owner(filepath.Join(state, "app/build/o")); u != 101000 {
		t.Errorf("a directory that was not bound was changed: %d", u)
	}
	if _, err := os.Lstat(filepath.Join(root, GivenFile)); err == nil || s.given != nil {
		t.Errorf("record left after the return (%v)", s.given)
	}
	// A crash: the record names app/build; the next supervisor returns it.
	if err := writeGiven(root, []string{"app/build"}); err != nil {
		t.Fatal(err)
	}
	if err := s.returnAfterCrash(root); err != nil {
		t.Fatal(err)
	}
	if u, g := owner(filepath.Join(state, "app/build/o")); u != 0 || g != 0 {
		t.Errorf("after the crash return app/build/o belongs to %d:%d", u, g)
	}
	if u, _ := owner(filepath.Join(state, "other/kept")); u != 101000 {
		t.Errorf("a path the record does not name was changed: %d", u)
	}
	// A damaged record returns all of Ignored Workspace State.
	os.WriteFile(filepath.Join(root, GivenFile), []byte("garbage"), 0o600)
	if err := s.returnAfterCrash(root); err != nil {
		t.Fatal(err)
	}
	if u, _ := owner(filepath.Join(state, "other/kept")); u != 0 {
		t.Errorf("a damaged record did not return everything: %d", u)
	}
	if _, err := os.Lstat(filepath.Join(root, GivenFile)); err == nil {
		t.Error("record left after the crash return")
	}
}
