package gitroute

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

// TestStickyPathsStayRouted: a sticky path and everything below it is
// routed to state although the rules no longer ignore it and even when
// the host tracks it; a Git directory is never routed by stickiness, and
// with isolation disabled (trusted configuration, FR-9) nothing is.
func TestStickyPathsStayRouted(t *testing.T) {
	rules := ignorerules.NewRules()
	if err := rules.AddGitignore("", []byte("# .venv/ and .env were removed from here\n*.log\n")); err != nil {
		t.Fatal(err)
	}
	rules.AddTracked(".env")
	rules.AddTracked("src/main.go")
	r := NewRouting(rules, nil, false)
	if r.Ignored(".venv", true) || r.Ignored(".env", false) {
		t.Fatal("the rules alone route .venv or .env")
	}
	r.AddSticky(".venv", ".env", "src/__pycache__", ".git")
	for rel, isDir := range map[string]bool{".venv": true, ".venv/secret": false, ".venv/bin/python": false, ".env": false, "src/__pycache__/m.pyc": false, "x.log": false} {
		if !r.Ignored(rel, isDir) {
			t.Errorf("%s not routed to state", rel)
		}
	}
	for rel, isDir := range map[string]bool{".venvx": true, ".env.local": false, "src": true, "src/main.go": false, ".git": true, ".git/config": false, "": true} {
		if r.Ignored(rel, isDir) {
			t.Errorf("%s routed to state", rel)
		}
	}
	off := NewRouting(rules, nil, true)
	off.AddSticky(".venv")
	if off.Ignored(".venv/secret", false) {
		t.Error("sticky path routed with isolation disabled")
	}
}
