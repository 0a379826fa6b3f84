package cli

import (
	"reflect"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/ignoredstate"
	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/stickyignore"
)

// TestStickyViewsAndRelease: list marks each sticky path by what isolates
// it now, and a release names exactly the host copies that become visible.
func TestStickyViewsAndRelease(t *testing.T) {
	rules := ignorerules.NewRules()
	rules.AddGitignore("", []byte("node_modules/\n"))
	rules.AddTracked(".env")
	rec := stickyignore.Empty()
	rec.Add([]stickyignore.Found{
		{Path: ".venv", Type: "dir", Host: true},
		{Path: ".env", Type: "file", Host: true},
		{Path: "node_modules", Type: "dir", Host: true},
	}, 1, time.Unix(0, 0))
	view := ignoredView{isolate: true, rules: rules, sticky: rec}
	got := map[string][3]bool{}
	for _, sv := range stickyViews(view, []ignoredstate.Entry{{Path: ".venv"}, {Path: "other.log"}}) {
		got[sv.Path.Path] = [3]bool{sv.IgnoredNow, sv.Tracked, sv.HasState}
	}
	want := map[string][3]bool{".venv": {false, false, true}, ".env": {false, true, false}, "node_modules": {true, false, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sticky views: %v, want %v", got, want)
	}
	if shared := sharedAfterRelease(view, rec.Paths); !reflect.DeepEqual(shared, []string{".env", ".venv"}) {
		t.Errorf("shared after releasing all: %v", shared)
	}
	view.isolate = false
	if shared := sharedAfterRelease(view, rec.Paths); len(shared) != 0 {
		t.Errorf("shared with isolation off: %v", shared)
	}
}
