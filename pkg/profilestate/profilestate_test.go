package profilestate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/removal"
)

func TestSourceLayout(t *testing.T) {
	src, err := Source("/s", "claude", "/home/agent/.claude")
	if err != nil || src != "/s/profiles/claude/paths/home%2Fagent%2F.claude/data" {
		t.Fatalf("source %q %v", src, err)
	}
	for _, bad := range [][2]string{{"../x", "/a"}, {"claude", "rel"}, {"claude", "/"}, {"claude", "/a/../b"}} {
		if _, err := Source("/s", bad[0], bad[1]); err == nil {
			t.Errorf("Source(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func owner(t *testing.T, p string) (uint32, uint32, os.FileMode) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return s.Uid, s.Gid, st.Mode()
}

func TestPrepareListSizesDiscard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns to another uid: run it as root (go test as root, like the other unit tests)")
	}
	root := t.TempDir()
	src, created, err := Prepare(root, "claude", "/home/agent/.claude", 1000, 1001)
	if err != nil || !created {
		t.Fatalf("prepare: %v created=%v", err, created)
	}
	if uid, gid, mode := owner(t, src); uid != 1000 || gid != 1001 || !mode.IsDir() || mode.Perm() != 0o700 {
		t.Fatalf("new data %d:%d %v", uid, gid, mode)
	}
	if uid, _, mode := owner(t, filepath.Dir(src)); uid != 0 || mode.Perm() != 0o700 {
		t.Fatalf("entry %d %v: the entry must be the caller's (the developer's), 0700", uid, mode)
	}
	if err := os.WriteFile(filepath.Join(src, "creds.json"), []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "x"), []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	// Again: kept as it is, not re-owned.
	os.Chown(src, 1002, 1002)
	if _, created, err := Prepare(root, "claude", "/home/agent/.claude", 1000, 1001); err != nil || created {
		t.Fatalf("second prepare: %v created=%v", err, created)
	}
	if uid, _, _ := owner(t, src); uid != 1002 {
		t.Fatalf("existing data re-owned to %d", uid)
	}
	if _, _, err := Prepare(root, "claude", "/srv/other", 0, 0); err != nil {
		t.Fatal(err)
	}
	gs, err := List(root, "claude")
	if err != nil || !reflect.DeepEqual(gs, []string{"/home/agent/.claude", "/srv/other"}) {
		t.Fatalf("list %v %v", gs, err)
	}
	if gs, err := List(root, "codex"); err != nil || gs != nil {
		t.Fatalf("list of a profile without state %v %v", gs, err)
	}
	us, err := Sizes(root, "claude")
	if err != nil {
		t.Fatal(err)
	}
	want := []Usage{{GuestPath: "/home/agent/.claude", Bytes: 8, Files: 4}, {GuestPath: "/srv/other"}}
	if !reflect.DeepEqual(us, want) {
		t.Fatalf("sizes %+v, want %+v", us, want)
	}
	// A reset is refused while a sandbox holds the profile.
	hold, err := Hold(root, "claude")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := LockExclusive(root, "claude"); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("exclusive lock while held: %v", err)
	}
	hold.Close()
	lock, found, err := LockExclusive(root, "claude")
	if err != nil || !found {
		t.Fatalf("exclusive lock: %v %v", found, err)
	}
	defer lock.Close()
	if _, found, err := LockExclusive(root, "codex"); err != nil || found {
		t.Fatalf("lock of a profile without state: %v %v", found, err)
	}
	found, err = Discard(root, "claude", "/home/agent/.claude", time.Unix(0, 42))
	if err != nil || !found {
		t.Fatalf("discard: %v %v", found, err)
	}
	if _, err := os.Lstat(filepath.Dir(src)); !os.IsNotExist(err) {
		t.Fatalf("entry still in place: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, removal.TrashDir, "profile-path.42", "data", "creds.json")); err != nil {
		t.Fatalf("entry not wholly in the trash: %v", err)
	}
	if found, err := Discard(root, "claude", "/home/agent/.claude", time.Now()); err != nil || found {
		t.Fatalf("second discard: %v %v", found, err)
	}
	if n, err := removal.PurgeTrash(context.Background(), root, 0); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if gs, _ := List(root, "claude"); !reflect.DeepEqual(gs, []string{"/srv/other"}) {
		t.Fatalf("after discard %v", gs)
	}
}

func TestPrepareRefusesPlantedSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	// The data directory replaced by a symlink.
	entry := filepath.Join(root, "profiles", "p", "paths", "srv%2Fx")
	if err := os.MkdirAll(entry, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(entry, "data")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Prepare(root, "p", "/srv/x", 0, 0); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("symlinked data accepted: %v", err)
	}
	// The paths directory replaced by a symlink: nothing created outside.
	if err := os.RemoveAll(filepath.Join(root, "profiles", "p", "paths")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "profiles", "p", "paths")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Prepare(root, "p", "/srv/x", 0, 0); err == nil {
		t.Fatal("symlinked paths directory accepted")
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Fatalf("created outside the Storage Root: %v", names)
	}
	if _, err := Discard(root, "p", "/srv/x", time.Now()); err == nil {
		t.Fatal("discard through a symlink accepted")
	}
}

func TestCheckImage(t *testing.T) {
	lower := t.TempDir()
	os.MkdirAll(filepath.Join(lower, "home/agent/.claude"), 0o755)
	os.WriteFile(filepath.Join(lower, "home/agent/.claude.json"), []byte("{}"), 0o644)
	os.Symlink("/etc", filepath.Join(lower, "home/agent/link"))
	for g, ok := range map[string]bool{
		"/home/agent/.claude": true, "/home/agent/.codex": true, "/srv/x/y": true,
		"/home/agent/.claude.json": false, "/home/agent/.claude.json/x": false, "/home/agent/link": false, "/home/agent/link/x": false,
	} {
		err := CheckImage(lower, g)
		if ok && err != nil || !ok && !errors.Is(err, errdefs.ErrRefused) {
			t.Errorf("%s: %v (want ok=%v)", g, err, ok)
		}
	}
}
