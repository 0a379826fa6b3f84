package gitroute

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestGuardUpdates: each update line replaces the router's whole guard
// (what the Runtime Supervisor hands over when the coordinator recomputed
// it); a malformed or unsafe line is refused and the guard in force stays.
func TestGuardUpdates(t *testing.T) {
	ws, state := t.TempDir(), t.TempDir()
	r, _ := testRouter(t, ws, state)
	if r.guarded(hostBackend, ".husky/pre-commit") {
		t.Fatal("guarded before any guard was set")
	}
	line := func(u GuardUpdate) string {
		b, err := u.Line()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	in := line(GuardUpdate{Trees: []string{".husky"}, Files: []string{"tools/ssh.sh"}}) +
		"{not json\n" +
		line(GuardUpdate{Files: []string{"../outside"}}) +
		`{"files":["a"],"unknown":1}` + "\n"
	readGuardUpdates(strings.NewReader(in), r, log)
	for _, p := range []string{".husky/pre-commit", ".husky", ".husky/_/h", "tools/ssh.sh"} {
		if !r.guarded(hostBackend, p) {
			t.Errorf("%s not guarded after the update", p)
		}
	}
	for _, p := range []string{"tools/other.sh", "a", "src/main.go"} {
		if r.guarded(hostBackend, p) {
			t.Errorf("%s guarded, but no valid update names it", p)
		}
	}
	if got := strings.Count(logs.String(), "guard update refused"); got != 3 {
		t.Errorf("%d refusals logged, want 3:\n%s", got, logs.String())
	}
	if r.guarded(stateBackend, ".husky/pre-commit") {
		t.Error("a path in Ignored Workspace State is guarded (host Git never reads it)")
	}
	// A later update replaces the guard whole: .husky is writable again.
	readGuardUpdates(strings.NewReader(line(GuardUpdate{Files: []string{".githooks/pre-push"}})), r, log)
	if r.guarded(hostBackend, ".husky/pre-commit") || !r.guarded(hostBackend, ".githooks/pre-push") {
		t.Error("the second update did not replace the first")
	}
}
