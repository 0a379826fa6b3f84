package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/guestbin"
)

// TestSpec37GuestBinariesOneCopyPerBuild: the in-sandbox binaries
// (lazaret-escalate, lazaret-init) of every generation are hard links to
// one copy per build in the runtime root (package guestbin), not the
// installed files and not a copy per start: two Domains running at once
// share the copy's inode, the guest runs the escalation client from it, the
// copy outlives the generations (linked nowhere else then), and
// `lazaret rm --all` removes it with the runtime root.
func TestSpec37GuestBinariesOneCopyPerBuild(t *testing.T) {
	parallel(t)
	e := need(t)
	r := newRmEnv(t)
	rt := e.userDir("guestbin-run-" + randHex(3))
	if err := os.Chmod(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "XDG_RUNTIME_DIR="+rt)
	runtimeRoot := filepath.Join(rt, "lazaret")
	ws1, ws2 := workspace(t), workspace(t)
	in1, _, wait1 := r.hold(t, ws1)
	in2, _, wait2 := r.hold(t, ws2)
	ended := false
	end := func() {
		if ended {
			return
		}
		ended = true
		in1.Write([]byte("x\n"))
		in2.Write([]byte("x\n"))
		in1.Close()
		in2.Close()
		if c1, c2 := wait1(), wait2(); c1 != 0 || c2 != 0 {
			t.Errorf("held sessions ended with %d and %d", c1, c2)
		}
	}
	defer end()

	entries, err := os.ReadDir(filepath.Join(runtimeRoot, guestbin.Dir))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the guest binary cache holds %v (%v), want one entry", entries, err)
	}
	entry := filepath.Join(runtimeRoot, guestbin.Dir, entries[0].Name())
	stat := func(p string) *syscall.Stat_t {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t)
	}
	for _, name := range []string{"lazaret-escalate", "lazaret-init"} {
		cached := stat(filepath.Join(entry, name))
		installed := stat(filepath.Join(e.bin, name))
		if cached.Ino == installed.Ino && cached.Dev == installed.Dev {
			t.Errorf("%s: the cache is the installed file, not a copy", name)
		}
		if cached.Nlink != 3 {
			t.Errorf("%s: the cached copy has %d links, want 3 (the cache and two generations)", name, cached.Nlink)
		}
		for _, ws := range []string{ws1, ws2} {
			g := stat(filepath.Join(runtimeRoot, string(domainOf(ws, "tiny")), "control", "bin", name))
			if g.Ino != cached.Ino || g.Dev != cached.Dev {
				t.Errorf("%s of %s is not the cached copy (inode %d, cache %d)", name, ws, g.Ino, cached.Ino)
			}
			if g.Mode&0o777 != 0o755 {
				t.Errorf("%s of %s has mode %o, want 755", name, ws, g.Mode&0o777)
			}
		}
	}
	// The guest runs the escalation client from it (a join of ws1).
	if res := r.run(t, ws1, "run", "-p", "tiny", "--", "sh", "-c", "/.lazaret/bin/lazaret-escalate --help >/dev/null 2>&1; echo rc=$?"); res.code != 0 || res.stdout != "rc=0\n" {
		t.Errorf("lazaret-escalate --help in the guest: %+v", res)
	}
	end()

	// The teardowns run after the CLIs exit: wait for the runtime
	// directories to go.
	var left []string
	waitUntil(30*time.Second, 100*time.Millisecond, func() bool {
		left = left[:0]
		ents, _ := os.ReadDir(runtimeRoot)
		for _, d := range ents {
			if d.Name() != guestbin.Dir {
				left = append(left, d.Name())
			}
		}
		return len(left) == 0
	})
	if len(left) > 0 {
		t.Errorf("runtime directories left: %v", left)
	}
	for _, name := range []string{"lazaret-escalate", "lazaret-init"} {
		if n := stat(filepath.Join(entry, name)).Nlink; n != 1 {
			t.Errorf("%s: %d links after both Domains ended, want 1 (the cache's)", name, n)
		}
	}
	if res := r.run(t, ws1, "rm", "--all", "--yes"); res.code != 0 {
		t.Fatalf("rm --all: %+v", res)
	}
	if _, err := os.Lstat(runtimeRoot); !errors.Is(err, os.ErrNotExist) {
		ents, _ := os.ReadDir(runtimeRoot)
		var names []string
		for _, d := range ents {
			names = append(names, d.Name())
		}
		t.Errorf("rm --all left the runtime root (%v): %s", err, strings.Join(names, ", "))
	}
	noProcessesOrMounts(t)
}
