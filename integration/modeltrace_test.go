package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/model/trace"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// Every scenario records a model trace by default: need(t) (which every
// scenario calls, directly or through workspace, lz and friends) opens one
// trace file per test, every lazaret invocation built by the harness names
// it in LAZARET_MODEL_TRACE (modelTraceEnv), and the coordinators and
// supervisors those invocations start record into it. When the test ends
// (after its deferred calls and the cleanups it registered later, so after
// its Domains stopped), the trace is replayed through Lazaret.tla's Next
// relation: a step the model does not allow fails the test with the first
// illegal step, the steps before it and the model state. A scenario that
// starts no Domain leaves its file empty and replays nothing.
//
// TestMain then checks the harness itself (checkModelTraces): a record in a
// file after its replay (a Domain that outlived its scenario) or a record
// made outside any scenario's trace fails the run, so a scenario that
// started a Domain cannot go unreplayed.

// modelTrace is one test's trace file.
type modelTrace struct {
	test     string
	path     string
	explicit bool      // recordModelTrace: the scenario must record steps
	gap      *modelGap // the documented gap the replay must stop at
	want     []string  // actions the scenario's code path must record
	replayed int64     // the file's size when it was replayed (-1: not yet)
	domains  int       // Domains replayed
	// parallel: the test runs side by side with others (parallel(t));
	// invocations find its trace through its workspaces, not the stack.
	parallel   bool
	workspaces []string // workspace(t)'s directories
	// manyDomains: the scenario runs more Domains at once than the
	// PreparedLower model's fixed-size state holds (expectManyDomains).
	manyDomains bool
}

var (
	traceMu     sync.Mutex
	traceByTest = map[*testing.T]*modelTrace{}
	traceStack  []*modelTrace // the innermost running (sub)test's trace last
	traceAll    []*modelTrace
	strayTrace  string // where records made outside any test's trace land
)

// activeModelTrace is the trace file a lazaret invocation built now in
// dir records into: the parallel scenario's whose workspace holds dir,
// else the innermost running serial test's, or the stray file. (Serial
// tests never run beside parallel ones: Go starts the parallel top-level
// tests after the last serial one ended.)
func activeModelTrace(dir string) string {
	if mt := traceForDir(dir); mt != nil {
		return mt.path
	}
	traceMu.Lock()
	defer traceMu.Unlock()
	if n := len(traceStack); n > 0 {
		return traceStack[n-1].path
	}
	return strayTrace
}

// modelTraceEnv is the environment entry naming activeModelTrace (nothing
// before the harness is set up).
func modelTraceEnv(dir string) []string {
	if p := activeModelTrace(dir); p != "" {
		return []string{modeltrace.Env + "=" + p}
	}
	return nil
}

// startModelTraces creates the stray-record file (setup).
func (e *env) startModelTraces() {
	dir := e.userDir("model-traces")
	strayTrace = filepath.Join(dir, "outside-any-scenario.jsonl")
	os.WriteFile(strayTrace, nil, 0o600)
	os.Chown(strayTrace, e.uid, e.gid)
}

// traceFor returns t's trace, opening it (and registering its replay) on
// first use. A test whose trace was already replayed gets none again.
func traceFor(t *testing.T, e *env) *modelTrace {
	t.Helper()
	traceMu.Lock()
	mt, ok := traceByTest[t]
	traceMu.Unlock()
	if ok {
		return mt
	}
	dir := e.userDir("model-traces")
	mt = &modelTrace{test: t.Name(), path: filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+randHex(3)+".jsonl"), replayed: -1, parallel: isParallel(t.Name())}
	if err := os.WriteFile(mt.path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(mt.path, e.uid, e.gid)
	traceMu.Lock()
	traceByTest[t] = mt
	if !mt.parallel {
		traceStack = append(traceStack, mt)
	}
	traceAll = append(traceAll, mt)
	traceMu.Unlock()
	t.Cleanup(func() {
		traceMu.Lock()
		for i := len(traceStack) - 1; i >= 0; i-- {
			if traceStack[i] == mt {
				traceStack = append(traceStack[:i], traceStack[i+1:]...)
				break
			}
		}
		traceMu.Unlock()
		finishModelTrace(t, e, mt)
	})
	return mt
}

// recordModelTrace marks the test as one whose code path must record
// model steps (an empty trace fails it), each action named in want among
// them. It returns the trace path. (Recording and replay themselves are
// the default for every scenario.)
func recordModelTrace(t *testing.T, want ...string) string {
	t.Helper()
	mt := traceFor(t, need(t))
	mt.explicit = true
	mt.want = append(mt.want, want...)
	return mt.path
}

// modelGap is a documented model-vs-code gap (tla/MAPPING.md "Gaps") that
// a scenario's trace shows: its replay must be rejected exactly there —
// at a step whose label starts with step, in a model state that has the
// line state — and nowhere else. A replay that passes fails the scenario
// too (the gap closed: remove the expectation and the MAPPING.md entry).
type modelGap struct {
	name  string // the MAPPING.md gap
	step  string // the rejected step's label prefix
	state string // a line of the model state before it
}

// gapRetainedGeneration: recovery retained a record of a dead generation
// (fail closed) and the next generation starts anyway; the model keeps
// the Domain Recovering until every resource is recovered.
var gapRetainedGeneration = modelGap{name: "retained generation", step: "StartNewDomain(", state: `/\ domainPhase = D1 :> "Recovering"`}

// expectManyDomains tells the trace replay that the scenario runs more
// Domains side by side than the PreparedLower model represents (the scale
// benchmark): a replay that stops for that reason alone
// (trace.ErrBeyondBounds) is logged; any step the model forbids still
// fails, and every Domain still replays through Lazaret.tla.
func expectManyDomains(t *testing.T) {
	t.Helper()
	traceFor(t, need(t)).manyDomains = true
}

// expectModelGap makes the test's trace replay expect gap g.
func expectModelGap(t *testing.T, g modelGap) {
	t.Helper()
	traceFor(t, need(t)).gap = &g
}

// finishModelTrace waits until every Domain in the trace ended its
// generation or the test user's processes are gone (a coordinator finishes
// its teardown after its last CLI exits; a scenario that did not wait for
// it still gets its whole trace), then replays it.
func finishModelTrace(t *testing.T, e *env, mt *modelTrace) {
	t.Helper()
	waitUntil(20*time.Second, 100*time.Millisecond, func() bool {
		return traceSettled(mt.path) || !strings.Contains(leftoversOf(e, t), "process ")
	})
	st, err := os.Stat(mt.path)
	if err != nil {
		t.Errorf("model trace: %v", err)
		return
	}
	mt.replayed = st.Size()
	if st.Size() == 0 && !mt.explicit {
		return // the scenario started no Domain
	}
	reps, err := replayModelTrace(t, mt.path, mt.manyDomains)
	var rej *trace.RejectError
	switch {
	case mt.gap == nil && err != nil:
		t.Fatalf("model trace %s:\n%v", mt.path, err)
	case mt.gap != nil && err == nil:
		t.Fatalf("model trace %s replays, but the scenario expects the model gap %q (tla/MAPPING.md): if the gap closed, remove expectModelGap and the MAPPING.md entry", mt.path, mt.gap.name)
	case mt.gap != nil && (!errors.As(err, &rej) || !strings.HasPrefix(rej.Label, mt.gap.step) || !strings.Contains(rej.State, mt.gap.state)):
		t.Fatalf("model trace %s: expected the model gap %q (rejection at %s… in a state with %s), got:\n%v", mt.path, mt.gap.name, mt.gap.step, mt.gap.state, err)
	case mt.gap != nil:
		t.Logf("model trace %s: the documented model gap %q (tla/MAPPING.md), as expected:\n%v", mt.path, mt.gap.name, err)
	}
	mt.domains = len(reps)
	var all []string
	for _, r := range reps {
		all = append(all, r.Steps...)
	}
	steps := "\n" + strings.Join(all, "\n")
	for _, w := range mt.want {
		if !strings.Contains(steps, "\n"+w+"(") {
			t.Errorf("model trace %s: no %s step was recorded", mt.path, w)
		}
	}
}

// traceSettled reports whether each Domain's last record in the trace at
// path ends a generation (FinishTeardown, FinishRecovery).
func traceSettled(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	recs, err := trace.ReadRecords(f)
	if err != nil {
		return false // a line being written
	}
	last := map[string]string{}
	for _, r := range recs {
		if r.Model == "Lazaret" {
			last[r.Domain] = r.Action
		}
	}
	for _, a := range last {
		if a != "FinishTeardown" && a != "FinishRecovery" {
			return false
		}
	}
	return true
}

// replayModelTrace replays the trace at path: each Domain's records
// through Lazaret.tla's Next; each traced Domain must end Absent.
// A replay error (a step the model rejects) is returned for the caller to
// judge (see modelGap); an unreadable or empty trace fails the test.
func replayModelTrace(t *testing.T, path string, manyDomains bool) ([]trace.DomainReplay, error) {
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
	// PreparedLower.tla: the whole trace at once (Domains share the
	// Storage Catalog); it has no documented gap, so a rejection fails.
	if pl, err := trace.ReplayPreparedLower(recs); manyDomains && errors.Is(err, trace.ErrBeyondBounds) {
		t.Logf("PreparedLower model trace %s: %d steps replayed, then more Domains at once than the model holds (expected here):\n%v", path, len(pl.Steps), err)
	} else if err != nil {
		t.Errorf("PreparedLower model trace %s:\n%v", path, err)
	} else if len(pl.Steps) > 0 {
		t.Logf("model trace: %d PreparedLower steps replayed (generations %v, artifacts %v, %d slots recycled; not Done: %v):\n  %s",
			len(pl.Steps), pl.Generations, pl.Artifacts, pl.Recycled, pl.Open, strings.Join(pl.Steps, "\n  "))
	}
	reps, err := trace.ReplayLazaret(recs)
	if err != nil {
		return reps, err
	}
	for _, r := range reps {
		if last := r.Steps[len(r.Steps)-1]; !strings.HasPrefix(last, "FinishTeardown(") && !strings.HasPrefix(last, "FinishRecovery(") {
			t.Errorf("model trace %s: Domain %s ends with %s, not with its teardown or recovery finished", path, r.Domain, last)
		}
		t.Logf("model trace: Domain %s: %d records replayed through Lazaret.tla (%d sessions, %d requests, %d request windows; the last window's steps):\n  %s",
			r.Domain, len(r.Steps), len(r.Config.Sessions), len(r.Config.Requests), r.Windows, strings.Join(r.Steps, "\n  "))
	}
	return reps, nil
}

// checkModelTraces is TestMain's check that no Domain escaped replay: every
// trace file was replayed whole (nothing was appended after its test's
// replay) and nothing recorded outside a test's trace. It returns the
// problems found, and a summary line.
func checkModelTraces() (problems []string, summary string) {
	traceMu.Lock()
	defer traceMu.Unlock()
	scenarios, domains := 0, 0
	for _, mt := range traceAll {
		st, err := os.Stat(mt.path)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: model trace %s: %v", mt.test, mt.path, err))
		case mt.replayed < 0:
			problems = append(problems, fmt.Sprintf("%s: model trace %s was never replayed", mt.test, mt.path))
		case st.Size() != mt.replayed:
			problems = append(problems, fmt.Sprintf("%s: model trace %s got %d bytes of records after its replay (a Domain outlived its scenario, or a process recorded late)", mt.test, mt.path, st.Size()-mt.replayed))
		}
		if mt.domains > 0 {
			scenarios++
			domains += mt.domains
		}
	}
	if strayTrace != "" {
		if st, err := os.Stat(strayTrace); err == nil && st.Size() > 0 {
			b, _ := os.ReadFile(strayTrace)
			problems = append(problems, fmt.Sprintf("model steps were recorded outside any scenario's trace (a lazaret invocation built while no test ran need(t)):\n%s", b))
		}
	}
	return problems, fmt.Sprintf("model traces: %d scenarios replayed %d Domain traces", scenarios, domains)
}

// TestModelTraceSwappedStepRejected: a trace recorded by a real run
// replays; the same trace with two emitted events swapped (the sandbox
// started before the sidecar was ready) is rejected at the first step the
// model does not allow, with the steps before it and the model state.
func TestModelTraceSwappedStepRejected(t *testing.T) {
	parallel(t)
	recs := runAndReadTrace(t, "StartSidecar", "StartSandbox")
	if _, err := trace.ReplayLazaret(recs); err != nil {
		t.Fatalf("the recorded trace is rejected:\n%v", err)
	}
	recs = slices.DeleteFunc(recs, func(r modeltrace.Record) bool { return r.Model != "Lazaret" }) // record numbers count the Domain's
	swapped, sidecar := swapRecorded(t, recs, "Lazaret", "StartSidecar", "StartSandbox")
	_, err := trace.ReplayLazaret(swapped)
	rej := wantRejection(t, err, "rejected at record", "StartSandbox(D1) recorded by rs", "not enabled", "preceding steps", "StartRuntimeSupervisor(D1)", `sidecarState = D1 :> "Stopped"`)
	if rej.Label != "StartSandbox(D1)" || rej.Line != sidecar+1 {
		t.Errorf("rejected at record %d %s, want record %d StartSandbox(D1)", rej.Line, rej.Label, sidecar+1)
	}
}

// swapRecorded returns recs with the last first and last second records
// of model exchanged (the first must precede the second), and the index
// where second now stands.
func swapRecorded(t *testing.T, recs []modeltrace.Record, model, first, second string) ([]modeltrace.Record, int) {
	t.Helper()
	a, b := -1, -1
	for i, r := range recs {
		if r.Model != model {
			continue
		}
		switch r.Action {
		case first:
			a = i
		case second:
			b = i
		}
	}
	if a < 0 || b < a {
		t.Fatalf("recorded trace lacks %s before %s: %+v", first, second, recs)
	}
	swapped := append([]modeltrace.Record(nil), recs...)
	swapped[a], swapped[b] = swapped[b], swapped[a]
	return swapped, a
}

// wantRejection checks that a replay of a swapped trace was rejected
// with a message naming each of wants.
func wantRejection(t *testing.T, err error, wants ...string) *trace.RejectError {
	t.Helper()
	var rej *trace.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("swapped trace: want a rejection, got %v", err)
	}
	msg := err.Error()
	for _, want := range wants {
		if !strings.Contains(msg, want) {
			t.Errorf("rejection message lacks %q:\n%s", want, msg)
		}
	}
	t.Logf("swapped trace rejected:\n%s", msg)
	return rej
}

// runAndReadTrace runs `lazaret run -p tiny -- true` in a new workspace,
// recording a model trace that must contain want, and returns the trace's
// records once every process has finished writing it.
func runAndReadTrace(t *testing.T, want ...string) []modeltrace.Record {
	t.Helper()
	ws := workspace(t)
	path := recordModelTrace(t, want...)
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	noLeftovers(t)
	waitUntil(10*time.Second, 100*time.Millisecond, func() bool { return traceSettled(path) })
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := trace.ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
