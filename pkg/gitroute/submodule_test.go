package gitroute

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

// TestSeedSubmoduleGitfiles: a real submodule's gitfile (naming the
// workspace's .git/modules/NAME) is copied into the state, where the
// router routes every .git below the top level; a copy the sandbox already
// has is kept; a gitfile naming a Git directory outside .git/modules, a
// symlinked .git and an embedded .git directory are not copied; the host's
// gitfiles are untouched.
func TestSeedSubmoduleGitfiles(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	os.MkdirAll(lib, 0o755)
	git(t, lib, "init", "-q", "-b", "main")
	write(t, filepath.Join(lib, "l.txt"), "l\n")
	git(t, lib, "add", "l.txt")
	git(t, lib, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "l")
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	git(t, ws, "init", "-q", "-b", "main")
	for _, name := range []string{"sub", "kept", "away"} {
		git(t, ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, name)
	}
	git(t, ws, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "subs")
	// away's gitfile names a directory outside .git/modules.
	write(t, filepath.Join(ws, "away", ".git"), "gitdir: ../../lib/.git\n")
	state := filepath.Join(root, "state")
	os.MkdirAll(filepath.Join(state, "kept"), 0o755)
	write(t, filepath.Join(state, "kept", ".git"), "gitdir: the sandbox's own\n")
	r, rules := testRouter(t, ws, state)
	if got := rules.Gitlinks(); len(got) != 3 {
		t.Fatalf("gitlinks %v", got)
	}
	hostSub, _ := os.ReadFile(filepath.Join(ws, "sub", ".git"))
	n, err := r.SeedSubmoduleGitfiles(ws, append(rules.Gitlinks(), "../escape", ".git/modules/sub"))
	if err != nil || n != 1 {
		t.Fatalf("seeded %d, %v; want 1 (sub)", n, err)
	}
	if b, err := os.ReadFile(filepath.Join(state, "sub", ".git")); err != nil || string(b) != string(hostSub) {
		t.Errorf("state sub/.git = %q, %v; want the host's %q", b, err, hostSub)
	}
	if b, _ := os.ReadFile(filepath.Join(state, "kept", ".git")); string(b) != "gitdir: the sandbox's own\n" {
		t.Errorf("the sandbox's own copy was replaced: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(state, "away", ".git")); err == nil {
		t.Errorf("a gitfile naming a directory outside .git/modules was copied")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", ".git")); string(b) != string(hostSub) {
		t.Errorf("the host's gitfile changed: %q", b)
	}
	// A second start: nothing more to copy.
	if n, err := r.SeedSubmoduleGitfiles(ws, rules.Gitlinks()); err != nil || n != 0 {
		t.Errorf("second seeding: %d, %v", n, err)
	}
	// A gitfile below an ignored directory is host content the sandbox
	// never sees: not read, even when named as a gitlink.
	write(t, filepath.Join(ws, ".gitignore"), "ign/\n")
	write(t, filepath.Join(ws, "ign", "x", ".git"), "gitdir: ../../.git/modules/sub\n")
	r2, _ := testRouter(t, ws, state)
	if n, _ := r2.SeedSubmoduleGitfiles(ws, []string{"ign/x"}); n != 0 {
		t.Errorf("a gitfile below an ignored directory was read and copied")
	}
	// A symlinked .git and an embedded .git directory are not read.
	os.Remove(filepath.Join(state, "sub", ".git"))
	os.Rename(filepath.Join(ws, "sub", ".git"), filepath.Join(ws, "sub", "gf"))
	os.Symlink("gf", filepath.Join(ws, "sub", ".git"))
	if n, _ := r.SeedSubmoduleGitfiles(ws, []string{"sub"}); n != 0 {
		t.Errorf("a symlinked gitfile was followed")
	}
	os.Remove(filepath.Join(ws, "sub", ".git"))
	os.Mkdir(filepath.Join(ws, "sub", ".git"), 0o755)
	if n, _ := r.SeedSubmoduleGitfiles(ws, []string{"sub"}); n != 0 {
		t.Errorf("an embedded .git directory was copied")
	}
}

// TestSeedLate: a submodule the host adds while the Domain runs gets its
// gitfile copied into the state the first time it is asked for, once per
// generation (a copy the sandbox deletes stays deleted), never for a
// working tree the start considered, and never for a gitfile naming a Git
// directory outside .git/modules.
func TestSeedLate(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	os.MkdirAll(lib, 0o755)
	git(t, lib, "init", "-q", "-b", "main")
	git(t, lib, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "--allow-empty", "-m", "l")
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	git(t, ws, "init", "-q", "-b", "main")
	git(t, ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "early")
	state := filepath.Join(root, "state")
	os.MkdirAll(state, 0o755)
	r, rules := testRouter(t, ws, state)
	if r.seedLate("early") {
		t.Errorf("seeded without the workspace's path")
	}
	r.ws = ws
	if n, err := r.SeedSubmoduleGitfiles(ws, rules.Gitlinks()); err != nil || n != 1 {
		t.Fatalf("start seeding: %d, %v", n, err)
	}
	os.Remove(filepath.Join(state, "early", ".git")) // the sandbox deletes its copy
	if r.seedLate("early") {
		t.Errorf("a working tree that had a copy at the start was seeded again")
	}
	// A submodule uninitialised at the start, initialised on the host.
	git(t, ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "uninit")
	os.Remove(filepath.Join(ws, "uninit", ".git"))
	if n, err := r.SeedSubmoduleGitfiles(ws, []string{"uninit"}); err != nil || n != 0 {
		t.Fatalf("seeding an uninitialised submodule: %d, %v", n, err)
	}
	write(t, filepath.Join(ws, "uninit", ".git"), "gitdir: ../.git/modules/uninit\n")
	if !r.seedLate("uninit") {
		t.Errorf("a submodule initialised on the host while the Domain runs was not given")
	}
	// The host adds a submodule while the Domain runs.
	git(t, ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "late")
	hostLate, _ := os.ReadFile(filepath.Join(ws, "late", ".git"))
	if !r.seedLate("late") {
		t.Fatal("the late submodule's gitfile was not given")
	}
	if b, err := os.ReadFile(filepath.Join(state, "late", ".git")); err != nil || string(b) != string(hostLate) {
		t.Errorf("state late/.git = %q, %v; want %q", b, err, hostLate)
	}
	os.Remove(filepath.Join(state, "late", ".git"))
	if r.seedLate("late") {
		t.Errorf("a deleted copy was given again")
	}
	// Not a submodule of this workspace, not a working tree, not .git.
	git(t, ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "away")
	write(t, filepath.Join(ws, "away", ".git"), "gitdir: ../../lib/.git\n")
	for _, p := range []string{"away", "nowhere", ".git/modules/late", "../x", ""} {
		if r.seedLate(p) {
			t.Errorf("seedLate(%q) copied a gitfile", p)
		}
	}
	if _, err := os.Lstat(filepath.Join(state, "away", ".git")); err == nil {
		t.Errorf("a gitfile naming a directory outside .git/modules was copied")
	}
}

// testRouter is a router over the host workspace ws and the state
// directory state with ws's rules, closed when the test ends.
func testRouter(t *testing.T, ws, state string) (*Router, *ignorerules.Rules) {
	t.Helper()
	rules, err := ignorerules.Load(ws, "")
	if err != nil {
		t.Fatal(err)
	}
	hostFD, _ := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	stateFD, _ := unix.Open(state, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	r := NewRouter(hostFD, stateFD, rules, nil, Guard{})
	t.Cleanup(r.Close)
	return r, rules
}
