package gitroute

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The router test mounts FUSE, which needs its own user+mount namespace:
// the test re-executes itself under `unshare -Urm` (as root or a user with
// a usable /dev/fuse).
const helperEnv = "LAZARET_GITROUTE_HELPER"

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRouterIgnoredWorkspaceState(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		root := t.TempDir()
		ws, state, mnt := filepath.Join(root, "ws"), filepath.Join(root, "state"), filepath.Join(root, "mnt")
		for _, d := range []string{ws, mnt} {
			os.MkdirAll(d, 0o755)
		}
		git(t, ws, "init", "-q")
		write(t, filepath.Join(ws, ".gitignore"), "node_modules/\n.env\n*.log\n")
		write(t, filepath.Join(ws, "src/main.go"), "package main\n")
		write(t, filepath.Join(ws, "tracked.log"), "tracked\n")
		git(t, ws, "add", "-f", ".gitignore", "src/main.go", "tracked.log")
		write(t, filepath.Join(ws, ".env"), "HOST_SECRET\n")
		write(t, filepath.Join(ws, "node_modules/x/index.js"), "host module\n")
		c := exec.Command("unshare", "-Urm", os.Args[0], "-test.run=^TestRouterIgnoredWorkspaceState$", "-test.v")
		c.Env = append(os.Environ(), helperEnv+"="+root)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("router scenario in a user+mount namespace: %v\n%s", err, out)
		}
		// Host side after the scenario.
		if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != "HOST_SECRET\n" {
			t.Errorf("host .env changed: %q", b)
		}
		if _, err := os.Stat(filepath.Join(ws, "node_modules/new")); err == nil {
			t.Errorf("ignored tree created through the router reached the host")
		}
		if b, _ := os.ReadFile(filepath.Join(state, "node_modules/new/a.js")); string(b) != "sandbox\n" {
			t.Errorf("state copy: %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "src/new.go")); string(b) != "package main // new\n" {
			t.Errorf("non-ignored write not on host: %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "tracked.log")); string(b) != "edited\n" {
			t.Errorf("tracked ignored-pattern file not live: %q", b)
		}
		return
	}
	root := os.Getenv(helperEnv)
	ws, state, mnt := filepath.Join(root, "ws"), filepath.Join(root, "state"), filepath.Join(root, "mnt")
	srv, r, err := Mount(ws, state, mnt, "", []string{".vscode"}, nil, Guard{}, Ownership{}, true, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	inProcess(t, srv)
	defer func() { srv.Unmount(); r.Close() }()
	if _, err := os.Stat(filepath.Join(mnt, ".env")); !os.IsNotExist(err) {
		t.Errorf(".env visible through the router: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "node_modules/x/index.js")); !os.IsNotExist(err) {
		t.Errorf("host node_modules visible: %v", err)
	}
	write(t, filepath.Join(mnt, "node_modules/new/a.js"), "sandbox\n")
	write(t, filepath.Join(mnt, ".env"), "SANDBOX\n")
	write(t, filepath.Join(mnt, "src/new.go"), "package main // new\n")
	write(t, filepath.Join(mnt, "tracked.log"), "edited\n")
	// One write and one read larger than MaxWrite: the kernel splits them
	// into requests of at most MaxWrite, which the router reassembles.
	big := make([]byte, 3*MaxWrite+12345)
	for i := range big {
		big[i] = byte(i*7 + i/4096)
	}
	write(t, filepath.Join(mnt, "src/big.bin"), string(big))
	if b, err := os.ReadFile(filepath.Join(ws, "src/big.bin")); err != nil || string(b) != string(big) {
		t.Errorf("large write through the router: %d bytes on the host (%v), want %d", len(b), err, len(big))
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "src/big.bin")); err != nil || string(b) != string(big) {
		t.Errorf("large read through the router: %d bytes (%v), want %d", len(b), err, len(big))
	}
	os.Remove(filepath.Join(mnt, "src/big.bin"))
	ents, _ := os.ReadDir(mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != ".env .git .gitignore node_modules src tracked.log" {
		t.Errorf("merged listing: %q", got)
	}
	// A directory descriptor opened before entries are created through
	// the mount and read only afterwards (runsc's gofer keeps one in its
	// dentry: tar -C DIR, then rm -rf DIR) lists them all, and they can
	// all be removed.
	late := filepath.Join(mnt, "node_modules/late")
	if err := os.Mkdir(late, 0o755); err != nil {
		t.Fatal(err)
	}
	early, err := os.Open(late)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		write(t, filepath.Join(late, fmt.Sprintf("file-with-a-long-name-%03d.js", i)), "x\n")
	}
	got, err := early.Readdirnames(-1)
	early.Close()
	if err != nil || len(got) != 300 {
		t.Errorf("a directory handle opened before 300 creations lists %d entries (%v)", len(got), err)
	}
	if err := os.RemoveAll(late); err != nil {
		t.Errorf("remove the directory: %v", err)
	}
	// A symlink planted inside is served as a symlink; the daemon never
	// follows it (reads through it resolve in this namespace, which in the
	// sandbox is the guest's).
	if err := os.Symlink("/etc", filepath.Join(mnt, "src/escape")); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(filepath.Join(mnt, "src/escape")); err != nil || tgt != "/etc" {
		t.Errorf("readlink: %q %v", tgt, err)
	}
	os.Remove(filepath.Join(mnt, "src/escape"))
	if err := os.Rename(filepath.Join(mnt, "src/new.go"), filepath.Join(mnt, "node_modules/moved.go")); err == nil {
		t.Errorf("rename from host to state succeeded; want EXDEV")
	}
	// Host edits are seen promptly although the kernel caches entries and
	// attributes for cacheTimeout: the daemon invalidates what inotify
	// reports (content and size, a new name after a negative lookup, a
	// deletion, a mode change).
	prompt := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(500 * time.Millisecond); !ok(); {
			if time.Now().After(deadline) {
				t.Errorf("host change not visible through the router within 500 ms: %s", what)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	in := filepath.Join(mnt, "src/main.go")
	os.Stat(in)
	os.ReadFile(in)
	write(t, filepath.Join(ws, "src/main.go"), "package main // edited on the host\n")
	prompt("content", func() bool { b, _ := os.ReadFile(in); return string(b) == "package main // edited on the host\n" })
	if _, err := os.Stat(filepath.Join(mnt, "src/host.go")); !os.IsNotExist(err) {
		t.Errorf("src/host.go: %v", err)
	}
	write(t, filepath.Join(ws, "src/host.go"), "x")
	prompt("new file after a negative lookup", func() bool { _, err := os.Stat(filepath.Join(mnt, "src/host.go")); return err == nil })
	os.Chmod(filepath.Join(ws, "src/host.go"), 0o600)
	prompt("mode", func() bool {
		st, err := os.Stat(filepath.Join(mnt, "src/host.go"))
		return err == nil && st.Mode().Perm() == 0o600
	})
	os.Remove(filepath.Join(ws, "src/host.go"))
	prompt("deletion", func() bool { _, err := os.Stat(filepath.Join(mnt, "src/host.go")); return os.IsNotExist(err) })
	os.MkdirAll(filepath.Join(ws, "src/deep/er"), 0o755)
	prompt("new directory", func() bool { _, err := os.Stat(filepath.Join(mnt, "src/deep/er")); return err == nil })
	write(t, filepath.Join(ws, "src/deep/er/f"), "1")
	prompt("file in a new directory", func() bool { b, _ := os.ReadFile(filepath.Join(mnt, "src/deep/er/f")); return string(b) == "1" })

	// The kernel caches directory listings: host and sandbox changes of
	// names still show in the next listing.
	listing := func(dir string) string {
		ents, _ := os.ReadDir(dir)
		var ns []string
		for _, e := range ents {
			ns = append(ns, e.Name())
		}
		return strings.Join(ns, " ")
	}
	os.MkdirAll(filepath.Join(ws, "src/ls"), 0o755)
	write(t, filepath.Join(ws, "src/ls/a"), "a")
	prompt("listing a", func() bool { return listing(filepath.Join(mnt, "src/ls")) == "a" })
	listing(filepath.Join(mnt, "src/ls"))
	write(t, filepath.Join(ws, "src/ls/b"), "b")
	prompt("listing after a host create", func() bool { return listing(filepath.Join(mnt, "src/ls")) == "a b" })
	write(t, filepath.Join(mnt, "src/ls/c"), "c")
	if got := listing(filepath.Join(mnt, "src/ls")); got != "a b c" {
		t.Errorf("listing after a sandbox create: %q", got)
	}
	os.Remove(filepath.Join(ws, "src/ls/a"))
	prompt("listing after a host delete", func() bool { return listing(filepath.Join(mnt, "src/ls")) == "b c" })

	// The kernel keeps file contents across opens (the daemon turns FUSE
	// opens off): a host rewrite of the same size is seen all the same.
	same := filepath.Join(mnt, "src/same.txt")
	write(t, filepath.Join(ws, "src/same.txt"), "aaaa")
	prompt("new file", func() bool { b, _ := os.ReadFile(same); return string(b) == "aaaa" })
	write(t, filepath.Join(ws, "src/same.txt"), "bbbb")
	prompt("same-size rewrite", func() bool { b, _ := os.ReadFile(same); return string(b) == "bbbb" })

	// A host change right after the sandbox's own change of the same name
	// or file is seen at once (the daemon compares, it does not ignore).
	quick := filepath.Join(mnt, "src/quick.txt")
	write(t, quick, "sandbox")
	os.Remove(filepath.Join(ws, "src/quick.txt"))
	write(t, filepath.Join(ws, "src/quick.txt"), "host replaced it")
	prompt("host replacement right after a sandbox create", func() bool { b, _ := os.ReadFile(quick); return string(b) == "host replaced it" })
	if f, err := os.OpenFile(quick, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		t.Fatal(err)
	} else {
		f.WriteString(" + sandbox")
		f.Close()
	}
	if f, err := os.OpenFile(filepath.Join(ws, "src/quick.txt"), os.O_WRONLY|os.O_APPEND, 0); err != nil {
		t.Fatal(err)
	} else {
		f.WriteString(" + host")
		f.Close()
	}
	prompt("host write right after a sandbox write", func() bool {
		b, _ := os.ReadFile(quick)
		return string(b) == "host replaced it + sandbox + host"
	})

	// An editor's save on the host (write a new file, rename it over) is
	// seen, never the old inode's content.
	write(t, filepath.Join(ws, "src/edit.txt"), "v1")
	prompt("edit v1", func() bool { b, _ := os.ReadFile(filepath.Join(mnt, "src/edit.txt")); return string(b) == "v1" })
	write(t, filepath.Join(ws, "src/.edit.txt.swp"), "v2")
	if err := os.Rename(filepath.Join(ws, "src/.edit.txt.swp"), filepath.Join(ws, "src/edit.txt")); err != nil {
		t.Fatal(err)
	}
	prompt("editor save", func() bool { b, _ := os.ReadFile(filepath.Join(mnt, "src/edit.txt")); return string(b) == "v2" })

	// A file unlinked while open stays readable and writable through the
	// open file (the temporary-file idiom), with its attributes.
	gone := filepath.Join(mnt, "src/gone.txt")
	write(t, gone, "still here")
	f, err := os.OpenFile(gone, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	if k, err := f.ReadAt(b, 0); string(b[:k]) != "still here" {
		t.Errorf("read of an unlinked open file: %q %v", b[:k], err)
	}
	if _, err := f.WriteAt([]byte(" and more"), 10); err != nil {
		t.Errorf("write to an unlinked open file: %v", err)
	}
	if k, err := f.ReadAt(b, 0); string(b[:k]) != "still here and more" {
		t.Errorf("read back from an unlinked open file: %q %v", b[:k], err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 19 {
		t.Errorf("stat of an unlinked open file: %v %v", st, err)
	}
	if err := f.Truncate(5); err != nil {
		t.Errorf("truncate of an unlinked open file: %v", err)
	}
	f.Close()

	// What the sandbox wrote can be run on the host at once: the daemon
	// keeps no descriptor open for writing (that would make the host
	// refuse to execute the file with ETXTBSY).
	script := filepath.Join(mnt, "src/run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(script); string(b) != "#!/bin/sh\necho ran\n" {
		t.Errorf("script read back: %q", b)
	}
	if out, err := exec.Command(filepath.Join(ws, "src/run.sh")).CombinedOutput(); err != nil || string(out) != "ran\n" {
		t.Errorf("host exec of a file the sandbox just wrote: %q %v", out, err)
	}
}

func TestDeniedGitNames(t *testing.T) {
	for rel, want := range map[string]bool{
		".git/commondir": true, ".git/config.worktree": true, ".git/hooks": true,
		".git/worktrees/w/commondir": true, ".git/worktrees/w/config.worktree": true,
		".git/modules/a/b/config": true, ".git/modules/a/hooks": true,
		".git/refs/heads/config": false, ".git/modules/new": true, ".git/modules": true, ".git/worktrees/x": true, ".git/modules/a/refs/heads/hooks": false,
		".git/logs/refs/heads/commondir": false, "src/config": false, ".git/index": false,
		".git/modules/a/modules": true, ".git/modules/a/modules/b": true, ".git/modules/a/b/modules/c": true,
		".git/modules/a/refs/heads/modules": false, ".git/modules/a/objects/modules/x": false, ".git/modules/a/x": false,
	} {
		if got := deniedName(rel); got != want {
			t.Errorf("denied(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestRouterGuardAndGitNames: the host Git configuration guard keeps
// guarded host paths read-only (EROFS) however the sandbox tries — write,
// truncate, chmod, delete, rename either way, link, create where missing,
// move the directory holding one (EXDEV) — while their neighbours and
// guarded paths routed to state stay writable; with isolation off and no
// host .git, `git init` and a nested repository land in state.
func TestRouterGuardAndGitNames(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		root := t.TempDir()
		ws, ws2 := filepath.Join(root, "ws"), filepath.Join(root, "ws2")
		for _, d := range []string{ws, ws2, filepath.Join(root, "mnt"), filepath.Join(root, "mnt2")} {
			os.MkdirAll(d, 0o755)
		}
		git(t, ws, "init", "-q")
		write(t, filepath.Join(ws, ".gitignore"), "*.local\n")
		write(t, filepath.Join(ws, "tools/ssh.sh"), "#!/bin/sh\nexit 1\n")
		write(t, filepath.Join(ws, ".husky/pre-commit"), "#!/bin/sh\nexit 0\n")
		write(t, filepath.Join(ws2, "src.txt"), "x\n")
		c := exec.Command("unshare", "-Urm", os.Args[0], "-test.run=^TestRouterGuardAndGitNames$", "-test.v")
		c.Env = append(os.Environ(), helperEnv+"="+root)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("router scenario in a user+mount namespace: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		if b, _ := os.ReadFile(filepath.Join(ws, "tools/ssh.sh")); string(b) != "#!/bin/sh\nexit 1\n" {
			t.Errorf("guarded host file changed: %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, ".husky/pre-commit")); string(b) != "#!/bin/sh\nexit 0\n" {
			t.Errorf("guarded host hook changed: %q", b)
		}
		for _, p := range []string{"conf/missing.inc", ".husky/pre-push", "x.local"} {
			if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
				t.Errorf("%s reached the host", p)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(root, "state", "x.local")); string(b) != "sandbox" {
			t.Errorf("guarded but ignored x.local not in state: %q", b)
		}
		for _, p := range []string{".git", "sub/.git"} {
			if _, err := os.Lstat(filepath.Join(ws2, p)); err == nil {
				t.Errorf("isolation off: %s reached the host", p)
			}
			if _, err := os.Stat(filepath.Join(root, "state2", p, "config")); err != nil {
				t.Errorf("isolation off: %s not in state: %v", p, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(ws2, "build.log")); string(b) != "host\n" {
			t.Errorf("isolation off: a plain path is not the host's: %q", b)
		}
		late := filepath.Join(ws, ".git/modules/late")
		if b, _ := os.ReadFile(filepath.Join(late, "config")); string(b) != "[core]\n\tbare = false\n" {
			t.Errorf("a late submodule's config changed: %q", b)
		}
		for _, p := range []string{"hooks/post-checkout", "modules/x", "x/config", "x/hooks", "modules/y/config"} {
			if _, err := os.Lstat(filepath.Join(late, p)); err == nil {
				t.Errorf("%s reached the late submodule's Git directory", p)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(late, "HEAD")); string(b) != "ref: refs/heads/topic\n" {
			t.Errorf("Git's HEAD update in a late submodule did not reach the host: %q", b)
		}
		// The refusals are in the daemon's log, with the fix.
		for _, want := range []string{"the Git Sentry refused a change the sandbox asked for", "path=.git/modules/late/config", "path=.git/worktrees/w/commondir", "fix=\"change Git configuration and hooks on the host"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("daemon log lacks %q", want)
			}
		}
		return
	}
	root := os.Getenv(helperEnv)
	ws, mnt := filepath.Join(root, "ws"), filepath.Join(root, "mnt")
	g := Guard{Files: []string{"tools/ssh.sh", "conf/missing.inc", "x.local"}, Trees: []string{".husky"}}
	srv, r, err := Mount(ws, filepath.Join(root, "state"), mnt, "", nil, nil, g, Ownership{}, true, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	inProcess(t, srv)
	defer func() { srv.Unmount(); r.Close() }()
	m := func(p string) string { return filepath.Join(mnt, p) }
	want := func(what string, err, errno error) {
		t.Helper()
		if !errors.Is(err, errno) {
			t.Errorf("%s: %v, want %v", what, err, errno)
		}
	}
	f, err := os.OpenFile(m("tools/ssh.sh"), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("touch /pwned\n")
		f.Close()
	}
	want("append", err, syscall.EROFS)
	want("truncating open", func() error { _, err := os.OpenFile(m("tools/ssh.sh"), os.O_WRONLY|os.O_TRUNC, 0); return err }(), syscall.EROFS)
	want("truncate", os.Truncate(m("tools/ssh.sh"), 0), syscall.EROFS)
	want("chmod", os.Chmod(m("tools/ssh.sh"), 0o777), syscall.EROFS)
	want("remove", os.Remove(m("tools/ssh.sh")), syscall.EROFS)
	want("rename away", os.Rename(m("tools/ssh.sh"), m("tools/old.sh")), syscall.EROFS)
	write(t, m("evil.sh"), "#!/bin/sh\ntouch /pwned\n")
	want("rename over", os.Rename(m("evil.sh"), m("tools/ssh.sh")), syscall.EROFS)
	want("link", os.Link(m("tools/ssh.sh"), m("alias.sh")), syscall.EROFS)
	want("move the directory", os.Rename(m("tools"), m("tools2")), syscall.EXDEV)
	os.Mkdir(m("staging"), 0o755)
	want("move a directory to a missing one that would hold a guarded path", os.Rename(m("staging"), m("conf")), syscall.EXDEV)
	if err := os.Mkdir(m("conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	// (os.Rename refuses an existing directory itself: the system call.)
	want("move a directory onto one holding a guarded path", syscall.Rename(m("staging"), m("conf")), syscall.EXDEV)
	want("create a missing guarded file", os.WriteFile(m("conf/missing.inc"), []byte("[core]\n\tfsmonitor = touch /pwned\n"), 0o644), syscall.EROFS)
	want("symlink at a missing guarded name", os.Symlink("/tmp/x", m("conf/missing.inc")), syscall.EROFS)
	want("write in a guarded tree", os.WriteFile(m(".husky/pre-commit"), []byte("touch /pwned\n"), 0o755), syscall.EROFS)
	want("create in a guarded tree", os.WriteFile(m(".husky/pre-push"), []byte("touch /pwned\n"), 0o755), syscall.EROFS)
	want("mkdir in a guarded tree", os.Mkdir(m(".husky/_"), 0o755), syscall.EROFS)
	want("mkdir of the existing tree", os.Mkdir(m(".husky"), 0o755), syscall.EEXIST)
	want("rmdir the tree", os.RemoveAll(m(".husky")), syscall.EROFS)
	// Neighbours, reads and guarded paths routed to state are untouched.
	if b, err := os.ReadFile(m("tools/ssh.sh")); err != nil || string(b) != "#!/bin/sh\nexit 1\n" {
		t.Errorf("read of a guarded file: %q %v", b, err)
	}
	if err := os.WriteFile(m("tools/other.sh"), []byte("ok"), 0o644); err != nil {
		t.Errorf("a neighbour of a guarded file: %v", err)
	}
	if err := os.Rename(m("evil.sh"), m("tools/moved.sh")); err != nil {
		t.Errorf("rename into the guarded file's directory: %v", err)
	}
	if err := os.WriteFile(m("x.local"), []byte("sandbox"), 0o644); err != nil {
		t.Errorf("a guarded path routed to state: %v", err)
	}

	// Git directories the host makes while the Domain runs (`git submodule
	// add` or `git worktree add` on the host), which no Git Sentry mount
	// covers: their control paths are refused by path, Git's data is not.
	late := filepath.Join(ws, ".git/modules/late")
	write(t, filepath.Join(late, "HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(late, "config"), "[core]\n\tbare = false\n")
	write(t, filepath.Join(late, "hooks/pre-commit.sample"), "#!/bin/sh\n")
	write(t, filepath.Join(late, "info/exclude"), "\n")
	write(t, filepath.Join(late, "refs/heads/main"), "0000000000000000000000000000000000000000\n")
	os.MkdirAll(filepath.Join(late, "objects"), 0o755)
	write(t, filepath.Join(late, "modules/y"), "")
	write(t, filepath.Join(ws, ".git/worktrees/w/commondir"), "../..\n")
	write(t, filepath.Join(ws, ".git/worktrees/w/HEAD"), "ref: refs/heads/side\n")
	f, err = os.OpenFile(m(".git/modules/late/config"), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("\tfsmonitor = touch /pwned\n")
		f.Close()
	}
	want("append to a late submodule's config", err, syscall.EROFS)
	want("truncate it", os.Truncate(m(".git/modules/late/config"), 0), syscall.EROFS)
	want("chmod it", os.Chmod(m(".git/modules/late/config"), 0o777), syscall.EROFS)
	want("remove it", os.Remove(m(".git/modules/late/config")), syscall.EROFS)
	want("rename it away", os.Rename(m(".git/modules/late/config"), m(".git/modules/late/old")), syscall.EROFS)
	want("link it", os.Link(m(".git/modules/late/config"), m(".git/modules/late/objects/alias")), syscall.EROFS)
	write(t, m(".git/modules/late/config.lock"), "[core]\n\tfsmonitor = touch /pwned\n")
	want("rename a lock file onto it", os.Rename(m(".git/modules/late/config.lock"), m(".git/modules/late/config")), syscall.EPERM)
	want("plant a hook", os.WriteFile(m(".git/modules/late/hooks/post-checkout"), []byte("#!/bin/sh\ntouch /pwned\n"), 0o755), syscall.EROFS)
	want("write a hook sample", os.WriteFile(m(".git/modules/late/hooks/pre-commit.sample"), []byte("touch /pwned\n"), 0o755), syscall.EROFS)
	want("write info/exclude", os.WriteFile(m(".git/modules/late/info/exclude"), []byte("*\n"), 0o644), syscall.EROFS)
	want("a late worktree's commondir", os.WriteFile(m(".git/worktrees/w/commondir"), []byte("/workspace/evil\n"), 0o644), syscall.EROFS)
	// Git's own work there goes on: objects, refs (a branch named config
	// too), HEAD through its lock file.
	write(t, m(".git/modules/late/objects/ab/cdef"), "blob")
	write(t, m(".git/modules/late/refs/heads/config"), "0000000000000000000000000000000000000000\n")
	write(t, m(".git/modules/late/HEAD.lock"), "ref: refs/heads/topic\n")
	if err := os.Rename(m(".git/modules/late/HEAD.lock"), m(".git/modules/late/HEAD")); err != nil {
		t.Errorf("Git's HEAD update in a late submodule: %v", err)
	}
	// A tree prepared below objects (where any name may be created) cannot
	// be moved in as a nested submodule's Git directory: the caller copies,
	// and the copy's control names are refused.
	write(t, m(".git/modules/late/objects/t/HEAD"), "ref: refs/heads/main\n")
	write(t, m(".git/modules/late/objects/t/config"), "[core]\n\tfsmonitor = touch /pwned\n")
	write(t, m(".git/modules/late/objects/t/hooks/post-checkout"), "#!/bin/sh\ntouch /pwned\n")
	want("move a prepared tree in as a nested submodule", os.Rename(m(".git/modules/late/objects/t"), m(".git/modules/late/modules/x")), syscall.EPERM)
	want("make a nested submodule's Git directory", os.Mkdir(m(".git/modules/late/modules/x"), 0o755), syscall.EPERM)
	want("move it in as a submodule", os.Rename(m(".git/modules/late/objects/t"), m(".git/modules/late2")), syscall.EPERM)
	want("move it in as a submodule named late/x", os.Rename(m(".git/modules/late/objects/t"), m(".git/modules/late/x")), syscall.EXDEV)
	if err := unix.Renameat2(unix.AT_FDCWD, m(".git/modules/late/objects/t"), unix.AT_FDCWD, m(".git/modules/late/modules/y"), unix.RENAME_EXCHANGE); err == nil {
		t.Errorf("exchanging a prepared tree with a file below .git/modules succeeded")
	}
	write(t, m(".git/modules/late/objects/u"), "")
	if err := unix.Renameat2(unix.AT_FDCWD, m(".git/modules/late/objects/t"), unix.AT_FDCWD, m(".git/modules/late/objects/u"), unix.RENAME_EXCHANGE); err != nil && err != unix.EINVAL {
		t.Errorf("exchange within objects: %v", err)
	}
	unix.Renameat2(unix.AT_FDCWD, m(".git/modules/late/objects/u"), unix.AT_FDCWD, m(".git/modules/late/objects/t"), unix.RENAME_EXCHANGE)
	if err := os.Mkdir(m(".git/modules/late/x"), 0o755); err != nil {
		t.Errorf("a new directory in a submodule's Git directory: %v", err)
	}
	want("copy its config in", os.WriteFile(m(".git/modules/late/x/config"), []byte("x"), 0o644), syscall.EPERM)
	want("copy its hooks in", os.Mkdir(m(".git/modules/late/x/hooks"), 0o755), syscall.EPERM)
	want("rename a submodule's modules away", os.Rename(m(".git/modules/late/modules"), m(".git/modules/late/objects/mods")), syscall.EROFS)

	// The sandbox's set-user-ID and set-group-ID bits never reach the
	// host's files (a directory keeps set-group-ID).
	write(t, m("tools/suid"), "#!/bin/sh\n")
	if err := syscall.Chmod(m("tools/suid"), 0o6755); err != nil {
		t.Errorf("chmod 6755: %v", err)
	}
	if fd, err := unix.Open(m("tools/suid2"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755); err != nil {
		t.Errorf("create 4755: %v", err)
	} else {
		unix.Close(fd)
	}
	if err := os.Mkdir(m("shared"), 0o755); err == nil {
		err = syscall.Chmod(m("shared"), 0o3775)
		if err != nil {
			t.Errorf("chmod 3775 of a directory: %v", err)
		}
	}
	for p, want := range map[string]uint32{"tools/suid": 0o755, "tools/suid2": 0o755, "shared": 0o3775} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws, p), &st); err != nil || st.Mode&0o7777&^0o022 != want&^0o022 {
			t.Errorf("host mode of %s: %04o (%v), want %04o", p, st.Mode&0o7777, err, want)
		}
	}

	// A submodule the host initialises in a directory the sandbox has
	// already looked into (its .git not found, that answer cached by the
	// kernel): the watch gives the sandbox its gitfile at once.
	os.MkdirAll(filepath.Join(ws, "w2"), 0o755)
	if _, err := os.Lstat(m("w2/.git")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("w2/.git before the host made it: %v", err)
	}
	write(t, filepath.Join(ws, "w2/.git"), "gitdir: ../.git/modules/w2\n")
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(m("w2/.git")); string(b) == "gitdir: ../.git/modules/w2\n" {
			break
		}
		if time.Now().After(deadline) {
			b, err := os.ReadFile(m("w2/.git"))
			t.Errorf("a gitfile the host made in a watched directory did not reach the sandbox within 2s: %q %v", b, err)
			break
		}
	}

	// Isolation off, no host .git: the sandbox's repositories stay in state.
	ws2, mnt2 := filepath.Join(root, "ws2"), filepath.Join(root, "mnt2")
	srv2, r2, err := Mount(ws2, filepath.Join(root, "state2"), mnt2, "", []string{".git"}, nil, Guard{}, Ownership{}, false, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	inProcess(t, srv2)
	defer func() { srv2.Unmount(); r2.Close() }()
	for _, d := range []string{".git", "sub/.git"} {
		os.MkdirAll(filepath.Join(mnt2, d, "hooks"), 0o755)
		if err := os.WriteFile(filepath.Join(mnt2, d, "config"), []byte("[core]\n\tfsmonitor = touch /pwned\n"), 0o644); err != nil {
			t.Errorf("%s/config inside: %v", d, err)
		}
	}
	if err := os.WriteFile(filepath.Join(mnt2, "build.log"), []byte("host\n"), 0o644); err != nil {
		t.Error(err)
	}
}

// TestOwnershipKeepID: the developer's files are reported as the session
// user; a guest chown is remembered for the inode (the host owner is not
// touched: Setattr never calls chown) and forgotten when the inode goes;
// files of other host owners are reported as they are.
func TestOwnershipKeepID(t *testing.T) {
	r := &Router{selfUID: 1001, selfGID: 1001}
	r.SetOwnership(Ownership{UID: 1000, GID: 1000})
	attr := func(ino uint64, uid, gid uint32) (uint32, uint32) {
		var a fuse.Attr
		r.fillAttr(hostBackend, &unix.Stat_t{Ino: ino, Uid: uid, Gid: gid, Mode: unix.S_IFREG | 0o644}, &a)
		return a.Uid, a.Gid
	}
	if u, g := attr(7, 1001, 1001); u != 1000 || g != 1000 {
		t.Errorf("developer's file reported as %d:%d, want 1000:1000", u, g)
	}
	if u, g := attr(8, 4242, 100); u != 4242 || g != 100 {
		t.Errorf("other host owner reported as %d:%d", u, g)
	}
	r.chown(7, 4242, true, 0, false)
	if u, g := attr(7, 1001, 1001); u != 4242 || g != 1000 {
		t.Errorf("after chown 4242: %d:%d, want 4242:1000", u, g)
	}
	r.chown(7, 0, false, 4343, true)
	if u, g := attr(7, 1001, 1001); u != 4242 || g != 4343 {
		t.Errorf("after chgrp 4343: %d:%d", u, g)
	}
	r.forgetOwner(7)
	if u, _ := attr(7, 1001, 1001); u != 1000 {
		t.Errorf("a removed inode keeps its guest owner: %d", u)
	}
	// A chown back to the session user leaves nothing remembered.
	r.chown(9, 5, true, 5, true)
	r.chown(9, 1000, true, 1000, true)
	if len(r.chowned) != 0 {
		t.Errorf("remembered owners: %v", r.chowned)
	}
}

// inProcess prepares a mount this test process itself reads: the daemon
// never touches its own mount (Mount skips go-fuse's poll probe), but Go's
// netpoller registers every file a process opens with epoll, and the
// first POLL on a mount served by the same process deadlocks unless the
// probe has taught the kernel that the file system does not poll.
func inProcess(t *testing.T, srv interface{ WaitMount() error }) {
	t.Helper()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
}

// TestRouterKeepsDeletedNumbers: a symlink deleted through the router
// while the kernel still holds its node keeps its host inode number until
// the node is forgotten, so no file created meanwhile gets that number
// (gVisor would serve such a file as the deleted symlink: see pinNumber);
// once the node is forgotten its pin is closed.
func TestRouterKeepsDeletedNumbers(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		root := t.TempDir()
		for _, d := range []string{"ws/churn", "state", "mnt"} {
			os.MkdirAll(filepath.Join(root, d), 0o755)
		}
		git(t, filepath.Join(root, "ws"), "init", "-q")
		c := exec.Command("unshare", "-Urm", os.Args[0], "-test.run=^TestRouterKeepsDeletedNumbers$", "-test.v")
		c.Env = append(os.Environ(), helperEnv+"="+root)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("router scenario in a user+mount namespace: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	root := os.Getenv(helperEnv)
	ws, state, mnt := filepath.Join(root, "ws"), filepath.Join(root, "state"), filepath.Join(root, "mnt")
	srv, r, err := Mount(ws, state, mnt, "", nil, nil, Guard{}, Ownership{}, true, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	inProcess(t, srv)
	defer func() { srv.Unmount(); r.Close() }()
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := fds()
	const rounds, files = 40, 16
	reused := 0
	for i := 0; i < rounds; i++ {
		link := filepath.Join(mnt, "churn", "link")
		if err := os.Symlink("/nonexistent-target", link); err != nil {
			t.Fatal(err)
		}
		// As the sandbox's gofer does, hold the node through the mount.
		held, err := unix.Open(link, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws, "churn", "link"), &st); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < files; j++ {
			p := filepath.Join(ws, "churn", fmt.Sprintf("f%d", j))
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var nst unix.Stat_t
			if unix.Stat(p, &nst) == nil && nst.Ino == st.Ino {
				reused++
			}
		}
		unix.Close(held)
		for j := 0; j < files; j++ {
			os.Remove(filepath.Join(ws, "churn", fmt.Sprintf("f%d", j)))
		}
	}
	if reused > 0 {
		t.Errorf("%d of %d files created while a deleted symlink's node was held got its inode number", reused, rounds*files)
	}
	// The kernel forgets the deleted nodes once nothing holds them; their
	// pins close then.
	deadline := time.Now().Add(5 * time.Second)
	for fds() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := fds(); n > before+2 {
		t.Errorf("%d descriptors open after the deleted nodes were released, %d before: pins leak", n, before)
	}
}

// TestMountHeldServesNothingBeforeServe: a mount MountHeld made answers no
// request until its serve loop runs (the daemon drops its capabilities in
// between), while its identity is readable without one (the Runtime
// Supervisor's statx, AT_STATX_DONT_SYNC); once served, the workspace is
// there.
func TestMountHeldServesNothingBeforeServe(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		root := t.TempDir()
		for _, d := range []string{"ws", "mnt"} {
			os.MkdirAll(filepath.Join(root, d), 0o755)
		}
		write(t, filepath.Join(root, "ws", "src/main.go"), "package main\n")
		c := exec.Command("unshare", "-Urm", os.Args[0], "-test.run=^TestMountHeldServesNothingBeforeServe$", "-test.v")
		c.Env = append(os.Environ(), helperEnv+"="+root)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("held mount in a user+mount namespace: %v\n%s", err, out)
		}
		return
	}
	root := os.Getenv(helperEnv)
	ws, state, mnt := filepath.Join(root, "ws"), filepath.Join(root, "state"), filepath.Join(root, "mnt")
	srv, r, err := MountHeld(ws, state, mnt, "", nil, nil, Guard{}, Ownership{}, true, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, mnt, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID|unix.STATX_INO, &stx); err != nil {
		t.Fatalf("statx of the held mount without a request: %v", err)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		t.Errorf("%s is not reported as a mount root", mnt)
	}
	// The held read uses the system calls directly: os.ReadFile would
	// register the file with Go's netpoller once the mount is served, and
	// that epoll_ctl asks this very process for POLL while holding its P,
	// so a garbage collection starting then waits for it forever (the
	// serving goroutine cannot run during the stop); inProcess's probe,
	// which teaches the kernel that the mount does not poll, cannot run
	// before the mount is served.
	read := make(chan error, 1)
	go func() {
		fd, err := unix.Open(filepath.Join(mnt, "src/main.go"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			var b [64]byte
			_, err = unix.Read(fd, b[:])
			unix.Close(fd)
		}
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("a read through the held mount was answered (%v) before the serve loop ran", err)
	case <-time.After(300 * time.Millisecond):
	}
	go srv.Serve()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("read once served: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held read was not answered once the mount was served")
	}
	if err := srv.Unmount(); err != nil {
		t.Error(err)
	}
}
