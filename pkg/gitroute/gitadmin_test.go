package gitroute

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestGitAdminPaths(t *testing.T) {
	for rel, want := range map[string]bool{
		".git/config": true, ".git/config.worktree": true, ".git/hooks/pre-commit": true, ".git/info/exclude": true,
		".git/modules/late/config": true, ".git/modules/late/hooks": true, ".git/modules/late/hooks/post-checkout": true,
		".git/modules/late/info/attributes": true, ".git/modules/a/b/config": true, ".git/modules/late/modules/x/config": true,
		".git/modules/late/modules/x/hooks/p": true, ".git/worktrees/w/commondir": true, ".git/worktrees/w/gitdir": true,
		".git/worktrees/w/config.worktree": true,
		// Git's data, and the Git directories themselves.
		".git/HEAD": false, ".git/index": false, ".git/packed-refs": false, ".git/refs/heads/config": false,
		".git/refs/heads/hooks/x": false, ".git/objects/t/config": false, ".git/logs/HEAD": false,
		".git/modules": false, ".git/modules/late": false, ".git/modules/late/HEAD": false, ".git/modules/late/index": false,
		".git/modules/late/refs/heads/config": false, ".git/modules/late/objects/ab/cd": false, ".git/modules/late/config.lock": false,
		".git/worktrees": false, ".git/worktrees/w": false, ".git/worktrees/w/HEAD": false,
		"config": false, "src/hooks/x": false, "lib/.git/config": false,
	} {
		if got := gitAdmin(rel); got != want {
			t.Errorf("gitAdmin(%q) = %v, want %v", rel, got, want)
		}
	}
	for rel, want := range map[string]bool{
		".git": true, ".git/modules": true, ".git/worktrees": true, ".git/modules/late": true, ".git/modules/late/modules": true,
		".git/modules/late/modules/x": true, ".git/modules/a/b": true, ".git/worktrees/w": true,
		".git/objects": false, ".git/objects/t": false, ".git/refs/heads": false, ".git/modules/late/objects/t": false,
		".git/modules/late/refs/heads/feature": false, ".git/rebase-merge": false, "src": false,
	} {
		if got := gitAdminHolds(rel); got != want {
			t.Errorf("gitAdminHolds(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestRefusalsLogged: each refused path is logged once with why and the
// fix; a flood of refusals is cut after maxLoggedRefusals with one line.
func TestRefusalsLogged(t *testing.T) {
	var buf bytes.Buffer
	f := &refusals{log: slog.New(slog.NewTextHandler(&buf, nil))}
	f.note(".git/modules/lib")
	f.note(".git/modules/lib")
	f.note(".git/modules/late/config")
	f.note(".git/worktrees/w")
	f.note("tools/ssh.sh")
	out := buf.String()
	for _, want := range []string{
		`path=.git/modules/lib why="it would be a new submodule Git directory`, "`git submodule add URL PATH`",
		`path=.git/modules/late/config why="it is Git configuration`,
		`path=.git/worktrees/w why="it would be a new linked worktree's Git directory`, "run `git worktree add` on the host",
		`path=tools/ssh.sh why="host Git reads or runs it`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "path=.git/modules/lib "); n != 1 {
		t.Errorf("the same refusal logged %d times", n)
	}
	for i := 0; i < 100; i++ {
		f.note(fmt.Sprintf(".git/modules/m%d", i))
	}
	out = buf.String()
	if n := strings.Count(out, "the Git Sentry refused a change"); n != maxLoggedRefusals {
		t.Errorf("%d refusals logged, want %d:\n%s", n, maxLoggedRefusals, out)
	}
	if n := strings.Count(out, "they are not logged"); n != 1 {
		t.Errorf("the cap was announced %d times", n)
	}
	var nilLog *refusals
	nilLog.note(".git/modules/x") // no logger: nothing, no panic
	(&refusals{}).note(".git/modules/x")
}
