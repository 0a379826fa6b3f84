package statetree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/mountns/mountnstest"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" {
			t.Skip("LAZARET_ALLOW_SKIP=1: needs root (mknod, chown)")
		}
		t.Fatal("needs root (mknod of device nodes, chown to foreign ids); run unit tests as root (make unit)")
	}
}

func openDirT(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func kinds(fs []Finding) map[string][]string {
	m := map[string][]string{}
	for _, f := range fs {
		m[f.Kind] = append(m[f.Kind], f.Path)
	}
	return m
}

const foreign = 4242

// checker accepts uid/gid 0 (the test's "developer") and 100000-165535,
// and calls foreign everything else.
func checker() *Checker {
	ok := func(id uint32) bool { return id == 0 || id >= 100000 && id < 165536 }
	return &Checker{OwnerOK: func(u, g uint32) bool { return ok(u) && ok(g) }, HostUID: 0, HostGID: 0}
}

// TestCheckerFindings (§3.8, SR-14): a crafted upper triggers each finding
// kind of the tree walk, and a symlink pointing out of the Domain Root is
// counted as data, never followed (what lies beyond it is not reported).
func TestCheckerFindings(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	outside := t.TempDir()
	// Beyond the symlinks: content that would produce findings if followed.
	os.WriteFile(filepath.Join(outside, "beyond"), []byte("x"), 0o644)
	os.Chown(filepath.Join(outside, "beyond"), foreign, foreign)
	if err := unix.Mknod(filepath.Join(outside, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	up := filepath.Join(root, "upper")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(up, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(up, "usr/bin/ok"), []byte("fine"), 0o755))
	must(os.WriteFile(filepath.Join(up, "usr/bin/subid"), []byte("fine"), 0o644))
	must(os.Chown(filepath.Join(up, "usr/bin/subid"), 100033, 100033))
	must(os.Symlink(outside, filepath.Join(up, "escape-dir")))
	must(os.Symlink("../../../../../../../../..", filepath.Join(up, "escape-rel")))
	must(os.Symlink(filepath.Join(outside, "beyond"), filepath.Join(up, "usr/bin/escape-file")))
	// A whiteout (allowed in an upper), a real char and block device.
	must(unix.Mknod(filepath.Join(up, "usr/bin/gone"), unix.S_IFCHR, 0))
	must(unix.Mknod(filepath.Join(up, "usr/bin/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(filepath.Join(up, "usr/bin/disk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
	must(unix.Mkfifo(filepath.Join(up, "usr/bin/fifo"), 0o600))
	// setuid and setgid files of the developer; setuid of a subordinate
	// id is fine (it is root inside the sandbox only).
	must(os.WriteFile(filepath.Join(up, "usr/bin/suid"), nil, 0o755))
	must(unix.Chmod(filepath.Join(up, "usr/bin/suid"), 0o4755))
	must(os.WriteFile(filepath.Join(up, "usr/bin/sgid"), nil, 0o755))
	must(unix.Chmod(filepath.Join(up, "usr/bin/sgid"), 0o2755))
	must(os.WriteFile(filepath.Join(up, "usr/bin/suid-sub"), nil, 0o755))
	must(os.Chown(filepath.Join(up, "usr/bin/suid-sub"), 100000, 100000))
	must(unix.Chmod(filepath.Join(up, "usr/bin/suid-sub"), 0o4755))
	// A foreign owner.
	must(os.WriteFile(filepath.Join(up, "usr/bin/foreign"), nil, 0o644))
	must(os.Chown(filepath.Join(up, "usr/bin/foreign"), foreign, 0))
	// Hard links: one to a file outside the tree, one pair inside.
	must(os.WriteFile(filepath.Join(outside, "linked"), []byte("l"), 0o644))
	must(os.Link(filepath.Join(outside, "linked"), filepath.Join(up, "usr/bin/linked-out")))
	must(os.WriteFile(filepath.Join(up, "usr/bin/a"), []byte("a"), 0o644))
	must(os.Link(filepath.Join(up, "usr/bin/a"), filepath.Join(up, "usr/bin/b")))

	c := checker()
	n := c.Tree(openDirT(t, up), "anchors/usr/upper", true)
	c.Finish()
	k := kinds(c.Findings)
	want := map[string][]string{
		FindDevice:   {"anchors/usr/upper/usr/bin/disk", "anchors/usr/upper/usr/bin/null"},
		FindSetID:    {"anchors/usr/upper/usr/bin/sgid", "anchors/usr/upper/usr/bin/suid"},
		FindOwner:    {"anchors/usr/upper/usr/bin/foreign"},
		FindHardLink: {"anchors/usr/upper/usr/bin/linked-out"},
	}
	for kind, paths := range want {
		if strings.Join(k[kind], ",") != strings.Join(paths, ",") {
			t.Errorf("%s findings: got %v, want %v", kind, k[kind], paths)
		}
	}
	if len(c.Findings) != 6 {
		t.Errorf("unexpected findings: %+v", c.Findings)
	}
	for _, f := range c.Findings {
		if strings.Contains(f.Path, "beyond") || strings.Contains(f.Path, outside) || strings.Contains(f.Path, "escape") {
			t.Errorf("a symlink was followed: %+v", f)
		}
	}
	if n.Symlinks != 3 || n.Whiteouts != 1 {
		t.Errorf("counts %+v: want 3 symlinks (data) and 1 whiteout", n)
	}
	// Outside an upper a whiteout is a device node like any other.
	c = checker()
	c.Tree(openDirT(t, up), "ignored-state", false)
	if got := kinds(c.Findings)[FindDevice]; len(got) != 3 {
		t.Errorf("without whiteouts: devices %v", got)
	}
}

// TestCheckerMountNotEntered: a directory on another filesystem is
// reported as an escape and not entered.
func TestCheckerMountNotEntered(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "m"), 0o755))
	mountnstest.InPrivateNamespace(t, func() error {
		if err := unix.Mount("tmpfs", filepath.Join(root, "m"), "tmpfs", 0, ""); err != nil {
			return err
		}
		os.WriteFile(filepath.Join(root, "m", "inside"), nil, 0o644)
		os.Chown(filepath.Join(root, "m", "inside"), foreign, foreign)
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		c := checker()
		c.Tree(fd, "ignored-state", false)
		unix.Close(fd)
		k := kinds(c.Findings)
		if len(k[FindEscape]) != 1 || k[FindEscape][0] != "ignored-state/m" || len(c.Findings) != 1 {
			return &findingsError{c.Findings}
		}
		return nil
	})
}

type findingsError struct{ fs []Finding }

func (e *findingsError) Error() string {
	var s []string
	for _, f := range e.fs {
		s = append(s, f.Kind+" "+f.Path)
	}
	return "findings: " + strings.Join(s, "; ")
}

// TestEmptyWork: the kernel's empty work/index directories are fine;
// leftovers are reported.
func TestEmptyWork(t *testing.T) {
	w := t.TempDir()
	os.Mkdir(filepath.Join(w, "work"), 0)
	os.Mkdir(filepath.Join(w, "index"), 0o700)
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(w, "work", "#67fa"), unix.S_IFCHR, 0); err != nil { // the kernel's shared whiteout
			t.Fatal(err)
		}
	}
	c := checker()
	c.EmptyWork(openDirT(t, w), "anchors/usr/work")
	if len(c.Findings) != 0 {
		t.Fatalf("clean work dir: %+v", c.Findings)
	}
	os.WriteFile(filepath.Join(w, "stray"), nil, 0o644)
	os.Chmod(filepath.Join(w, "work"), 0o700)
	os.WriteFile(filepath.Join(w, "work", "#12"), nil, 0o644)
	c.EmptyWork(openDirT(t, w), "anchors/usr/work")
	if got := kinds(c.Findings)[FindWork]; strings.Join(got, ",") != "anchors/usr/work/stray,anchors/usr/work/work" {
		t.Fatalf("leftovers: %+v", c.Findings)
	}
}

// TestSwapEmptyCrashConsistency (OR-5): each prefix of SwapEmpty's steps
// leaves Active the previous tree or a complete empty one, and FinishSwap
// (or a later SwapEmpty) moves the rest to the trash.
func TestSwapEmptyCrashConsistency(t *testing.T) {
	setup := func() (string, Swap) {
		d := t.TempDir()
		os.MkdirAll(filepath.Join(d, "active", "sub"), 0o755)
		os.WriteFile(filepath.Join(d, "active", "sub", "f"), []byte("v"), 0o644)
		os.Mkdir(filepath.Join(d, "trash"), 0o700)
		n := 0
		return d, Swap{Dir: openDirT(t, d), Active: "active", SwapName: "active.swap", TrashDir: openDirT(t, filepath.Join(d, "trash")), Mode: 0o755,
			TrashName: func() string { n++; return "gen" + string(rune('0'+n)) }}
	}
	prior := func(d string) bool { _, err := os.Stat(filepath.Join(d, "active", "sub", "f")); return err == nil }
	empty := func(d string) bool {
		e, err := os.ReadDir(filepath.Join(d, "active"))
		return err == nil && len(e) == 0
	}
	// Crash after step 2: swap made, not exchanged.
	d, s := setup()
	os.Mkdir(filepath.Join(d, "active.swap"), 0o755)
	if !prior(d) {
		t.Fatal("prior tree not active after step 2")
	}
	if err := FinishSwap(s); err != nil || !prior(d) {
		t.Fatalf("finish after step 2: %v", err)
	}
	// Crash after step 3: exchanged, previous tree in swap.
	d, s = setup()
	os.Mkdir(filepath.Join(d, "active.swap"), 0o755)
	if err := unix.Renameat2(s.Dir, "active.swap", s.Dir, "active", unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	if !empty(d) {
		t.Fatal("empty tree not active after step 3")
	}
	if err := SwapEmpty(s); err != nil || !empty(d) {
		t.Fatalf("a reset after a crash at step 3: %v", err)
	}
	if e, _ := os.ReadDir(filepath.Join(d, "trash")); len(e) != 2 {
		t.Fatalf("trash %v", e)
	}
	// No active tree yet: the empty one simply becomes it.
	d, s = setup()
	os.RemoveAll(filepath.Join(d, "active"))
	if err := SwapEmpty(s); err != nil || !empty(d) {
		t.Fatalf("swap without an active tree: %v", err)
	}
	// Purge deletes the trash, never following a symlink in it.
	d, s = setup()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644)
	os.Symlink(outside, filepath.Join(d, "active", "sub", "link"))
	if err := SwapEmpty(s); err != nil {
		t.Fatal(err)
	}
	if n, err := Purge(s.TrashDir); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatal("purge followed a symlink out of the trash")
	}
}

// TestMkdirAllBeneath: every component is created (existing ones kept),
// the last is opened; a symlinked component is refused, not followed.
func TestMkdirAllBeneath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	os.Mkdir(filepath.Join(root, "a"), 0o700)
	fd, err := MkdirAllBeneath(rfd, "a/b/c", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if fi, err := os.Stat(filepath.Join(root, "a", "b", "c")); err != nil || !fi.IsDir() {
		t.Fatalf("a/b/c not created: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "a")); fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing component's mode changed: %v", fi.Mode())
	}
	if fd, err := MkdirAllBeneath(rfd, "", 0o755); err != nil {
		t.Errorf("no component: %v", err)
	} else {
		unix.Close(fd)
	}
	os.Symlink(outside, filepath.Join(root, "link"))
	if fd, err := MkdirAllBeneath(rfd, "link/x", 0o755); err == nil {
		unix.Close(fd)
		t.Error("a symlinked component was followed")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("a directory was created through the symlink")
	}
}
