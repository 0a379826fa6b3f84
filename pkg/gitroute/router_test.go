package gitroute

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
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
	srv, r, err := Mount(ws, state, mnt, "", []string{".vscode"}, true, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
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
	ents, _ := os.ReadDir(mnt)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != ".env .git .gitignore node_modules src tracked.log" {
		t.Errorf("merged listing: %q", got)
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
}

func TestDeniedGitNames(t *testing.T) {
	for rel, want := range map[string]bool{
		".git/commondir": true, ".git/config.worktree": true, ".git/hooks": true,
		".git/worktrees/w/commondir": true, ".git/worktrees/w/config.worktree": true,
		".git/modules/a/b/config": true, ".git/modules/a/hooks": true,
		".git/refs/heads/config": false, ".git/modules/new": true, ".git/modules": true, ".git/worktrees/x": true, ".git/modules/a/refs/heads/hooks": false,
		".git/logs/refs/heads/commondir": false, "src/config": false, ".git/index": false,
	} {
		if got := denied(rel); got != want {
			t.Errorf("denied(%q) = %v, want %v", rel, got, want)
		}
	}
}
