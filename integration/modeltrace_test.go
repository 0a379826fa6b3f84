package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/trace"
)

// activeModelTrace is the model-trace file every lazaret invocation of
// the running test records into ("" when the test records none); cmdWith
// names it in LAZARET_MODEL_TRACE.
var activeModelTrace string

// recordModelTrace makes every lazaret invocation of the test (and the
// coordinators and supervisors they start) record its protocol steps in
// the model's vocabulary, and replays the trace through Lazaret.tla's Next
// relation when the test ends: a step the model does not allow fails the
// test with the first illegal step, the steps before it and the model
// state. The test must have let its Domains stop (noLeftovers) before it
// returns; each traced Domain must end Absent. Each action named in want
// must be among the replayed steps (the scenario's code path records it).
// It returns the trace path.
func recordModelTrace(t *testing.T, want ...string) string {
	t.Helper()
	e := need(t)
	dir := e.userDir("model-traces")
	path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+randHex(3)+".jsonl")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, e.uid, e.gid)
	activeModelTrace = path
	t.Cleanup(func() {
		activeModelTrace = ""
		reps := replayModelTrace(t, path)
		var all []string
		for _, r := range reps {
			all = append(all, r.Steps...)
		}
		steps := "\n" + strings.Join(all, "\n")
		for _, w := range want {
			if !strings.Contains(steps, "\n"+w+"(") {
				t.Errorf("model trace %s: no %s step was recorded", path, w)
			}
		}
	})
	return path
}

// replayModelTrace replays the trace at path (see recordModelTrace).
func replayModelTrace(t *testing.T, path string) []trace.DomainReplay {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("model trace: %v", err)
	}
	defer f.Close()
	recs, err := trace.ReadRecords(f)
	if err != nil {
		t.Fatalf("model trace %s: %v", path, err)
	}
	if len(recs) == 0 {
		t.Fatalf("model trace %s is empty: no process recorded (is LAZARET_MODEL_TRACE passed on from the CLI to the coordinator?)", path)
	}
	reps, err := trace.ReplayLazaret(recs)
	if err != nil {
		t.Fatalf("model trace %s:\n%v", path, err)
	}
	for _, r := range reps {
		if last := r.Steps[len(r.Steps)-1]; !strings.HasPrefix(last, "FinishTeardown(") && !strings.HasPrefix(last, "FinishRecovery(") {
			t.Errorf("model trace %s: Domain %s ends with %s, not with its teardown or recovery finished", path, r.Domain, last)
		}
		t.Logf("model trace: Domain %s: %d records replayed through Lazaret.tla (%d sessions, %d requests):\n  %s",
			r.Domain, len(r.Steps), len(r.Config.Sessions), len(r.Config.Requests), strings.Join(r.Steps, "\n  "))
	}
	return reps
}
