package anchor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/mountns/mountnstest"
)

func TestNameRoundTrip(t *testing.T) {
	for _, p := range []string{"/usr", "/var/lib", "/root/.cache", "/a%2Fb", "/x%y/z"} {
		n, err := Name(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := GuestPath(n)
		if err != nil || back != p {
			t.Errorf("%s -> %s -> %s, %v", p, n, back, err)
		}
	}
	for _, p := range []string{"/", "usr", "/usr/", "/a/../b", "/a,b", "/a:b"} {
		if _, err := Name(p); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q accepted: %v", p, err)
		}
	}
	for _, n := range []string{".trash", "", "a/b", "a%2", "a%2f"} {
		if _, err := GuestPath(n); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}

func clock() func() time.Time {
	n := int64(0)
	return func() time.Time { n++; return time.Unix(0, n) }
}

// anchorDir creates a Domain Root with one anchor whose upper holds a file.
func anchorDir(t *testing.T) (root, upper string) {
	root = t.TempDir()
	upper = filepath.Join(root, Dir, "usr", upperName)
	if err := os.MkdirAll(filepath.Join(upper, "local", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(upper, "local", "bin", "tool"), []byte("x"), 0o755)
	return root, upper
}

// TestResetCrashConsistency (OR-5): every prefix of the reset's steps leaves
// the active upper either the previous one or a complete empty one, and
// RecoverAll (or a later reset) finishes the rest.
func TestResetCrashConsistency(t *testing.T) {
	// Crash after step 2 (empty upper.swap made, not exchanged).
	root, upper := anchorDir(t)
	os.Mkdir(filepath.Join(root, Dir, "usr", swapName), 0o755)
	if _, err := os.Stat(filepath.Join(upper, "local/bin/tool")); err != nil {
		t.Fatal("prior upper not active")
	}
	l, _ := List(root)
	if len(l) != 1 || !l[0].ResetPending || l[0].Empty {
		t.Fatalf("list %+v", l)
	}
	if err := RecoverAll(root, clock()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(upper, "local/bin/tool")); err != nil {
		t.Fatal("recovery changed the prior upper")
	}
	// Crash after step 3 (exchanged, old upper in upper.swap).
	root, upper = anchorDir(t)
	swap := filepath.Join(root, Dir, "usr", swapName)
	os.Mkdir(swap, 0o755)
	if err := unix.Renameat2(unix.AT_FDCWD, swap, unix.AT_FDCWD, upper, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(upper); len(ents) != 0 {
		t.Fatal("active upper not the empty one")
	}
	if err := RecoverAll(root, clock()); err != nil {
		t.Fatal(err)
	}
	if n, _ := TrashEntries(root); n != 1 {
		t.Fatalf("trash %d", n)
	}
	if _, err := os.Stat(swap); !os.IsNotExist(err) {
		t.Fatal("swap left")
	}
	// A full reset.
	root, upper = anchorDir(t)
	found, err := Reset(root, "/usr", clock())
	if err != nil || !found {
		t.Fatal(found, err)
	}
	if ents, _ := os.ReadDir(upper); len(ents) != 0 {
		t.Fatal("upper not empty after reset")
	}
	if n, _ := TrashEntries(root); n != 1 {
		t.Fatalf("trash %d", n)
	}
	if found, err := Reset(root, "/opt", clock()); found || err != nil {
		t.Fatalf("reset of an absent anchor: %v %v", found, err)
	}
}

// TestResetRefusesSymlinks (SR-14): a symlink where an anchor directory is
// expected is refused, never followed out of the Domain Root.
func TestResetRefusesSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, upperName), 0o755)
	os.Mkdir(filepath.Join(root, Dir), 0o700)
	if err := os.Symlink(outside, filepath.Join(root, Dir, "usr")); err != nil {
		t.Fatal(err)
	}
	if _, err := Reset(root, "/usr", clock()); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("symlinked anchor: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, swapName)); !os.IsNotExist(err) {
		t.Fatal("reset wrote outside the Domain Root")
	}
}

// TestMountUnmountIdentity mounts a real overlay in a private mount
// namespace (needs root, like the other mount tests): writes land in the
// upper, the lower is untouched, the identity is verified before unmount and
// absence is observed after; a symlink in the lower is refused.
func TestMountUnmountIdentity(t *testing.T) {
	mountnstest.InPrivateNamespace(t, func() error { return mountScenario(t) })
}

func mountScenario(t *testing.T) error {
	base := t.TempDir()
	lower := filepath.Join(base, "lower")
	os.MkdirAll(filepath.Join(lower, "usr", "bin"), 0o755)
	os.WriteFile(filepath.Join(lower, "usr", "bin", "old"), []byte("lower"), 0o644)
	os.Symlink("usr", filepath.Join(lower, "lib"))
	root := filepath.Join(base, "domain")
	os.Mkdir(root, 0o700)
	target := filepath.Join(base, "bundle", "anchors", "usr")
	if _, _, err := Mount(root, lower, "/lib", target+"x", "pl-a", time.Now); !errors.Is(err, ErrMissingInImage) {
		t.Errorf("symlinked lower accepted: %v", err)
	}
	id, notice, err := Mount(root, lower, "/usr", target, "pl-a", time.Now)
	if err != nil {
		return err
	}
	if notice != nil {
		t.Errorf("notice on a fresh anchor: %+v", notice)
	}
	os.WriteFile(filepath.Join(target, "bin", "new"), []byte("upper"), 0o644)
	os.Remove(filepath.Join(target, "bin", "old"))
	if _, err := os.Stat(filepath.Join(lower, "usr", "bin", "old")); err != nil {
		t.Errorf("lower changed: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, Dir, "usr", upperName, "bin", "new")); string(b) != "upper" {
		t.Errorf("write not in the upper")
	}
	ins, err := Inspect(root, "/usr", lower, GuestIDs{})
	if err != nil {
		return err
	}
	kinds := map[string]string{}
	for _, c := range ins.Changes {
		kinds[c.Path] = c.Kind
	}
	if kinds["/usr/bin/new"] != "added" || kinds["/usr/bin/old"] != "deleted" || len(ins.Changes) != 2 || ins.Bytes != 5 {
		t.Errorf("inspect: %+v", ins)
	}
	os.RemoveAll(filepath.Join(target, "bin"))
	os.Mkdir(filepath.Join(target, "bin"), 0o755)
	if ins, _ := Inspect(root, "/usr", lower, GuestIDs{}); len(ins.Changes) != 1 || ins.Changes[0].Kind != "opaque" {
		t.Errorf("inspect after replacing bin: %+v", ins)
	}
	os.WriteFile(filepath.Join(target, "bin", "new"), []byte("upper"), 0o644)
	if err := Matches(id); err != nil {
		t.Errorf("matches: %v", err)
	}
	bad := id
	bad.MountID++
	if err := Unmount(bad); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("mismatched unmount: %v", err)
	}
	if err := Unmount(id); err != nil {
		return err
	}
	if err := Absent(id); err != nil {
		t.Errorf("absent: %v", err)
	}
	// Remount over another artifact: the change is reported.
	id2, notice, err := Mount(root, lower, "/usr", target, "pl-b", time.Now)
	if err != nil {
		return err
	}
	if notice == nil || !notice.ImageChanged || notice.WrittenOver != "pl-a" {
		t.Errorf("image change not reported: %+v", notice)
	}
	if _, err := os.Stat(filepath.Join(target, "bin", "old")); !os.IsNotExist(err) {
		t.Errorf("opaque directory lost: %v", err)
	}
	if id2.MountID == id.MountID {
		t.Errorf("mount ID reused")
	}
	self := []string{"/proc/thread-self/mountinfo"} // this locked thread's namespace
	if u := inUseIn(root, self); len(u) == 0 {
		t.Errorf("InUse does not see the mount")
	}
	if err := Unmount(id2); err != nil {
		return err
	}
	if u := inUseIn(root, self); len(u) != 0 {
		t.Errorf("InUse after unmount: %v", u)
	}
	if found, err := Reset(root, "/usr", time.Now); !found || err != nil {
		t.Errorf("reset: %v", err)
	}
	if n, err := PurgeTrash(root, time.Now); n != 1 || err != nil {
		t.Errorf("purge %d %v", n, err)
	}
	return nil
}

// TestGuestIDs: owners are reported as the ids the sandbox shows — the
// developer as root, subordinate id start+k as k+1, others as -1.
func TestGuestIDs(t *testing.T) {
	g := GuestIDs{HostUID: 1001, HostGID: 1002, UIDStart: 100000, GIDStart: 200000, Count: 65536}
	for host, want := range map[uint32]int64{1001: 0, 100000: 1, 100041: 42, 165533: 65534, 165534: 65535, 165535: -1, 0: -1, 99999: -1} {
		if got := g.UID(host); got != want {
			t.Errorf("UID(%d) = %d, want %d", host, got, want)
		}
	}
	if g.GID(1002) != 0 || g.GID(200041) != 42 || g.GID(1001) != -1 {
		t.Errorf("GID: %d %d %d", g.GID(1002), g.GID(200041), g.GID(1001))
	}
}
