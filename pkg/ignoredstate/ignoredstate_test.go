package ignoredstate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

func clock() func() time.Time {
	n := int64(0)
	return func() time.Time { n++; return time.Unix(0, n) }
}

// ignored routes node_modules (and below) and *.log to state, like a
// .gitignore of "node_modules/\n*.log".
func ignored(rel string, isDir bool) bool {
	top, _, _ := strings.Cut(rel, "/")
	return top == "node_modules" || strings.HasSuffix(rel, ".log") && !isDir
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixture: a Domain Root with state and a host workspace.
func fixture(t *testing.T) (root, ws string) {
	root, ws = t.TempDir(), t.TempDir()
	st := filepath.Join(root, Dir)
	write(t, filepath.Join(st, "node_modules/a/index.js"), "aaaa")
	write(t, filepath.Join(st, "node_modules/b/index.js"), "sandbox")
	write(t, filepath.Join(st, "src/build.log"), "log")
	write(t, filepath.Join(st, "src/old.txt"), "stale") // no longer ignored
	os.MkdirAll(filepath.Join(st, "empty/mirror"), 0o755)
	write(t, filepath.Join(ws, "node_modules/b/index.js"), "host!!!")
	write(t, filepath.Join(ws, "node_modules/c/index.js"), "host only")
	write(t, filepath.Join(ws, "src/main.go"), "package main")
	return root, ws
}

func TestListEntries(t *testing.T) {
	root, _ := fixture(t)
	es, err := List(root, ignored)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		s := e.Path + ":" + e.Type
		if e.Stale {
			s += ":stale"
		}
		got = append(got, s)
	}
	if strings.Join(got, " ") != "node_modules:dir src/build.log:file src/old.txt:file:stale" {
		t.Fatalf("list: %v", got)
	}
	if es[0].Files != 2 || es[0].Bytes != 11 {
		t.Errorf("node_modules counts %+v", es[0].Counts)
	}
	if es, err := List(t.TempDir(), ignored); err != nil || len(es) != 0 {
		t.Errorf("no state: %v %v", es, err)
	}
}

func TestInspectAgainstHost(t *testing.T) {
	root, ws := fixture(t)
	es, _ := List(root, ignored)
	ins, err := Inspect(root, ws, es[0], ignored)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ins.Changes {
		got = append(got, c.Kind+" "+c.Path)
	}
	want := "added node_modules/a,modified node_modules/b/index.js,deleted node_modules/c"
	if strings.Join(got, ",") != want {
		t.Fatalf("changes: %v, want %s", got, want)
	}
	// A host entry the rules do not route to state is not "deleted".
	write(t, filepath.Join(ws, "src/keep.txt"), "x")
	ins, _ = Inspect(root, ws, es[1], ignored)
	if len(ins.Changes) != 1 || ins.Changes[0].Kind != "added" || ins.Changes[0].Path != "src/build.log" {
		t.Fatalf("build.log: %+v", ins.Changes)
	}
}

func TestResetPathAndAll(t *testing.T) {
	root, _ := fixture(t)
	for _, bad := range []string{"", "/etc", "../x", "a/../b", "."} {
		if _, err := Reset(root, bad, clock()); err == nil {
			t.Errorf("reset of %q accepted", bad)
		}
	}
	found, err := Reset(root, "node_modules", clock())
	if err != nil || !found {
		t.Fatal(found, err)
	}
	if _, err := os.Lstat(filepath.Join(root, Dir, "node_modules")); !os.IsNotExist(err) {
		t.Fatal("node_modules state still there")
	}
	if found, err := Reset(root, "src/build.log", clock()); err != nil || !found {
		t.Fatal(found, err)
	}
	if found, err := Reset(root, "nothing/here", clock()); err != nil || found {
		t.Fatal(found, err)
	}
	if n, _ := TrashEntries(root); n != 2 {
		t.Fatalf("trash %d", n)
	}
	if err := ResetAll(root, clock()); err != nil {
		t.Fatal(err)
	}
	if es, err := List(root, ignored); err != nil || len(es) != 0 {
		t.Fatalf("after reset --all: %v %v", es, err)
	}
	if n, _ := TrashEntries(root); n != 3 {
		t.Fatalf("trash %d", n)
	}
	// A crash after the exchange: recovery moves the previous state away.
	write(t, filepath.Join(root, Dir, "node_modules/x"), "x")
	os.Mkdir(filepath.Join(root, swapName), 0o700)
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, swapName), unix.AT_FDCWD, filepath.Join(root, Dir), unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if n, err := PurgeTrash(root, clock()); err != nil || n != 4 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := os.Lstat(filepath.Join(root, swapName)); !os.IsNotExist(err) {
		t.Fatal("swap left after recovery")
	}
}

// TestResetRefusesSymlinkedState (SR-14): a symlink in place of the state
// directory or of a mirror directory is refused, never followed.
func TestResetRefusesSymlinkedState(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "node_modules/x"), "x")
	write(t, filepath.Join(outside, "src/a.log"), "x")
	os.Symlink(outside, filepath.Join(root, Dir))
	if _, err := Reset(root, "node_modules", clock()); err == nil {
		t.Fatal("reset through a symlinked state directory")
	}
	os.Remove(filepath.Join(root, Dir))
	os.Mkdir(filepath.Join(root, Dir), 0o700)
	os.Symlink(filepath.Join(outside, "src"), filepath.Join(root, Dir, "src"))
	if _, err := Reset(root, "src/a.log", clock()); err == nil {
		t.Fatal("reset through a symlinked mirror directory")
	}
	if _, err := os.Stat(filepath.Join(outside, "src/a.log")); err != nil {
		t.Fatal("reset touched a file outside the Domain Root")
	}
	if es, _ := List(root, ignored); len(es) != 1 || es[0].Path != "src" || es[0].Type != "symlink" || !es[0].Stale {
		t.Fatalf("list followed a symlink (want only the symlink itself, as stale data): %+v", es)
	}
}

// TestVerifyIgnored: a device node, a foreign owner and an interrupted
// reset are reported; symlinks (even out of the Domain Root) are data.
func TestVerifyIgnored(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" {
			t.Skip("LAZARET_ALLOW_SKIP=1: needs root (mknod, chown)")
		}
		t.Fatal("needs root (mknod, chown); run unit tests as root (make unit)")
	}
	root, _ := fixture(t)
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(root, Dir, "node_modules/.bin"))
	c := &statetree.Checker{OwnerOK: func(u, g uint32) bool { return u == 0 && g == 0 }, HostUID: 1 << 30, HostGID: 1 << 30}
	v, err := Verify(root, c)
	if err != nil || !v.Present || len(v.Findings) != 0 || v.Symlinks != 1 {
		t.Fatalf("clean state: %+v %v", v, err)
	}
	unix.Mknod(filepath.Join(root, Dir, "node_modules/dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
	write(t, filepath.Join(root, Dir, "node_modules/theirs"), "x")
	os.Chown(filepath.Join(root, Dir, "node_modules/theirs"), 4242, 4242)
	os.Mkdir(filepath.Join(root, swapName), 0o700)
	v, err = Verify(root, c)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range v.Findings {
		got = append(got, f.Kind+"@"+f.Path)
	}
	want := "reset-pending@ignored-state.swap device@ignored-state/node_modules/dev owner@ignored-state/node_modules/theirs"
	if strings.Join(got, " ") != want {
		t.Fatalf("findings %v, want %s", got, want)
	}
	// A symlinked state directory is an escape, not followed.
	root2 := t.TempDir()
	os.Symlink(outside, filepath.Join(root2, Dir))
	v, _ = Verify(root2, c)
	if len(v.Findings) != 1 || v.Findings[0].Kind != statetree.FindEscape || v.Present {
		t.Fatalf("symlinked state: %+v", v)
	}
}
