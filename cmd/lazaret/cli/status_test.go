package cli

import (
	"strings"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/hostcheck"
)

func TestSelectStatuses(t *testing.T) {
	// client.Statuses sorts by workspace.
	docs := []*lv1.DomainStatus{
		statusDoc("/a", "tiny", "stopped"), statusDoc("/a", "default", "running"),
		statusDoc("/b", "tiny", "unreachable"), statusDoc("/c", "default", "stopped"), statusDoc("/c", "claude", "starting"),
	}
	ids := func(ds []*lv1.DomainStatus) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.GetDomainId())
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		name   string
		sel    *statusSelection
		all    bool
		want   string
		hidden int
	}{
		{"default: not stopped, by workspace and profile", nil, false, "/a/default /b/tiny /c/claude", 2},
		{"all: running first", nil, true, "/a/default /b/tiny /c/claude /a/tiny /c/default", 0},
		{"workspace, any state and profile", &statusSelection{workspace: "/c"}, false, "/c/claude /c/default", 0},
		{"workspace and profile", &statusSelection{workspace: "/a", profile: "tiny"}, false, "/a/tiny", 0},
		{"nothing selected", &statusSelection{workspace: "/d"}, false, "", 0},
	} {
		shown, hidden := selectStatuses(docs, tc.sel, tc.all)
		if got := ids(shown); got != tc.want || hidden != tc.hidden {
			t.Errorf("%s: %q hidden %d, want %q hidden %d", tc.name, got, hidden, tc.want, tc.hidden)
		}
	}
}

func TestNoStatusText(t *testing.T) {
	for _, tc := range []struct {
		total, hidden int
		sel           *statusSelection
		want          string
	}{
		{0, 0, nil, "no Domains yet"},
		{3, 3, nil, "no running Domain (3 stopped Domains: `lazaret status --all` lists them"},
		{1, 1, nil, "(1 stopped Domain: "},
		{2, 0, &statusSelection{workspace: "/w"}, "no Domain for the workspace /w yet: `lazaret run` there starts one"},
		{2, 0, &statusSelection{workspace: "/w", profile: "tiny"}, "no Domain of profile tiny for the workspace /w yet: `lazaret run -p tiny` there starts one"},
	} {
		if got := noStatusText(tc.total, tc.hidden, tc.sel); !strings.Contains(got, tc.want) {
			t.Errorf("noStatusText(%d, %d, %+v) = %q, want it to contain %q", tc.total, tc.hidden, tc.sel, got, tc.want)
		}
	}
}

// TestMarkFromScanHeld: a stopped Domain whose lock a coordinator holds
// is shown stopping, with the logs command; others are left as they are.
func TestMarkFromScanHeld(t *testing.T) {
	docs := []*lv1.DomainStatus{statusDoc("/a", "tiny", "stopped"), statusDoc("/b", "tiny", "stopped"), statusDoc("/c", "tiny", "running")}
	markFromScan(docs, []hostcheck.DomainState{{ID: "/a/tiny", LockHeld: true}, {ID: "/b/tiny"}, {ID: "/c/tiny", LockHeld: true}}, "")
	want := []string{"stopping", "stopped", "running"}
	for i, d := range docs {
		if d.GetState() != want[i] {
			t.Errorf("%s: %s, want %s", d.GetDomainId(), d.GetState(), want[i])
		}
	}
	if e := docs[0].GetError(); !strings.Contains(e, "its lock is held and no coordinator serves it") || !strings.Contains(e, "`lazaret logs -C /a -p tiny`") {
		t.Errorf("stopping Domain's error: %q", e)
	}
}

// TestMarkFromScanCrashed: a stopped Domain whose lock no coordinator holds
// while its runtime directory remains is shown crashed, with the run that
// recovers it; one whose lock is held is stopping (TestMarkFromScanHeld); a
// stopped one without a runtime directory and a running one are left as
// they are.
func TestMarkFromScanCrashed(t *testing.T) {
	docs := []*lv1.DomainStatus{statusDoc("/a", "tiny", "stopped"), statusDoc("/b", "tiny", "stopped"), statusDoc("/c", "tiny", "stopped"), statusDoc("/d", "tiny", "running")}
	markFromScan(docs, []hostcheck.DomainState{
		{ID: "/a/tiny", RuntimeLeft: true},
		{ID: "/b/tiny"},
		{ID: "/c/tiny", RuntimeLeft: true, LockHeld: true},
		{ID: "/d/tiny", RuntimeLeft: true},
	}, "")
	want := []string{"crashed", "stopped", "stopping", "running"}
	for i, d := range docs {
		if d.GetState() != want[i] {
			t.Errorf("%s: %s, want %s", d.GetDomainId(), d.GetState(), want[i])
		}
	}
	if e := docs[0].GetError(); !strings.Contains(e, "`lazaret run -C /a -p tiny -- true` recovers it") || strings.Contains(e, "free") {
		t.Errorf("crashed Domain's error: %q", e)
	}
	// On a full filesystem the recovering run would be refused: the error
	// says so.
	docs = []*lv1.DomainStatus{statusDoc("/a", "tiny", "stopped")}
	markFromScan(docs, []hostcheck.DomainState{{ID: "/a/tiny", RuntimeLeft: true}}, "the Storage Root /s is on a filesystem with 0 B free")
	if e := docs[0].GetError(); !strings.Contains(e, "recovers it, as any next run there does; the Storage Root /s is on a filesystem with 0 B free") {
		t.Errorf("crashed Domain's error on a full filesystem: %q", e)
	}
}
