package lazaret

import (
	"flag"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/model/check"
)

var (
	full      = flag.Bool("full", false, "explore the full tla/Lazaret.cfg fixture instead of the reduced one")
	maxStates = flag.Int("max-states", 0, "stop after this many distinct states (0: no bound)")
	maxDepth  = flag.Int("max-depth", 0, "do not expand states at this depth (0: no bound)")
	liveness  = flag.Bool("liveness", true, "check liveness properties (needs the complete graph)")
	maxHeap   = flag.Uint64("max-heap-mib", 3584, "stop when the Go heap exceeds this many MiB (0: no bound)")
)

// TestModel explores the configuration and fails on any violation.
func TestModel(t *testing.T) {
	cfg := Reduced()
	if *full {
		cfg = Fixture()
	}
	m := New(cfg)
	res := check.Run(m.Spec(), check.Options{
		MaxStates: *maxStates, MaxDepth: *maxDepth, Liveness: *liveness, MaxHeapBytes: *maxHeap << 20,
		Progress: os.Stderr, ProgressEvery: 30 * time.Second,
	})
	t.Logf("%s: %d distinct states, %d states generated, %d edges, depth %d, deadlock states %d, complete %v%s, liveness checked %v, %s",
		cfg.Name, res.Distinct, res.Generated, res.Edges, res.Depth, res.Deadlocks, res.Complete, boundNote(res.Bound), res.Liveness, res.Duration.Round(time.Millisecond))
	if !res.Complete {
		t.Logf("exploration stopped by a bound (%s): the result is partial and liveness was not checked", res.Bound)
	}
	for _, v := range res.Violations {
		t.Errorf("%s", v.String(m.Format))
	}
}

// unfiredInFixture are the action instances the full fixture never fires,
// by construction of its constants (R1 is the auto-approvable request, R2
// the prompted one, R3 the foreign-sandbox one that must never be received;
// see tla/README.md). TestCoverage fails when this set changes, so an edit
// that silently makes an action unreachable (a vacuous check) is noticed.
var unfiredInFixture = []string{
	"RejectConfigurationMismatch(S1)", "RejectConfigurationMismatch(S2)", "RefusePathMismatchCleanup(D1)",
	"QueuePrompt(R1)", "BeginPrompt(R1)", "DeveloperApprove(R1, ExactCmd)", "DeveloperApprove(R1, PromptCmd)",
	"DeveloperApprove(R1, ShellCmd)", "DeveloperApprove(R1, EditedCmd)", "DeveloperDeny(R1)",
	"AutoApprove(R2)", "DeveloperApprove(R2, ExactCmd)", "DeveloperApprove(R2, PromptCmd)", "DeveloperApprove(R2, ShellCmd)",
	"ReceiveEscalation(R3)", "AutoApprove(R3)", "QueuePrompt(R3)", "BeginPrompt(R3)", "DeveloperApprove(R3, ExactCmd)",
	"DeveloperApprove(R3, PromptCmd)", "DeveloperApprove(R3, ShellCmd)", "DeveloperApprove(R3, EditedCmd)",
	"DeveloperDeny(R3)", "StartHostExecution(R3)", "CompleteHostExecution(R3)", "TimeoutRequest(R3)",
	"CancelRequest(R3)", "FailHostExecution(R3)", "DeliverResult(R3)",
}

// TestCoverage explores the full fixture and checks which action instances
// never fire against unfiredInFixture (run with -v to see every count).
func TestCoverage(t *testing.T) {
	m := New(Fixture())
	sp := m.Spec()
	res := check.Run(sp, check.Options{})
	var unfired []string
	for i, a := range sp.Actions {
		t.Logf("%8d %s", res.Fired[i], a.Name)
		if res.Fired[i] == 0 {
			unfired = append(unfired, a.Name)
		}
	}
	want := append([]string(nil), unfiredInFixture...)
	sort.Strings(want)
	sort.Strings(unfired)
	if strings.Join(unfired, "\n") != strings.Join(want, "\n") {
		t.Fatalf("action instances that never fire changed:\n got %v\nwant %v", unfired, want)
	}
}

func boundNote(b string) string {
	if b == "" {
		return ""
	}
	return " (" + b + ")"
}

// TestModelMismatchedSession explores the full fixture with S2 on another
// configuration (the fixture never fires RejectConfigurationMismatch): a
// mismatched session is refused while the Domain starts, runs or stops,
// and every invariant and liveness property still holds.
func TestModelMismatchedSession(t *testing.T) {
	cfg := Fixture()
	cfg.Name = "Lazaret.cfg with S2 mismatched"
	cfg.SessionFingerprint = append([]string(nil), cfg.SessionFingerprint...)
	cfg.SessionFingerprint[1] = "config-b"
	m := New(cfg)
	sp := m.Spec()
	res := check.Run(sp, check.Options{Liveness: true, MaxHeapBytes: *maxHeap << 20})
	for _, v := range res.Violations {
		t.Errorf("%s", v.String(m.Format))
	}
	if !res.Complete {
		t.Fatalf("exploration stopped by a bound (%s)", res.Bound)
	}
	fired := map[string]int{}
	for i, a := range sp.Actions {
		fired[a.Name] = res.Fired[i]
	}
	if fired["RejectConfigurationMismatch(S2)"] == 0 || fired["RegisterSession(S2)"] != 0 {
		t.Errorf("S2 mismatched: RejectConfigurationMismatch fired %d times, RegisterSession %d times", fired["RejectConfigurationMismatch(S2)"], fired["RegisterSession(S2)"])
	}
	t.Logf("%s: %d distinct states, liveness checked %v", cfg.Name, res.Distinct, res.Liveness)
}
