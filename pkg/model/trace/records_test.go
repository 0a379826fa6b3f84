package trace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// recordRun emits, through package modeltrace exactly as the Host
// Coordinator and Runtime Supervisor do, the steps one `lazaret run` of
// an integration test recorded (a fresh Domain, one session, ordered
// teardown), then the next run's bootstrap and start, and reads them back.
func recordRun(t *testing.T) []modeltrace.Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	t.Setenv(modeltrace.Env, path)
	if err := modeltrace.Start("hc", os.Getenv); err != nil {
		t.Fatal(err)
	}
	const dom, s1, s2 = "8501ae07", "cli-101", "cli-202"
	for _, a := range [][]string{
		{"StartNewDomain", s1}, {"CreateTrustAnchor", dom}, {"StartRuntimeSupervisor", dom}, {"MountStateAnchor", dom},
		{"StartSidecar", dom}, {"ArmRuntimeCausalEdge", dom}, {"StartSandbox", dom}, {"PublishDomain", dom},
		{"AdvanceWaitingSession", s1}, {"RegisterSession", s1}, {"DisconnectSession", s1}, {"BeginTeardown", dom},
		{"StopSandbox", dom}, {"StopSidecar", dom}, {"UnmountStateAnchor", dom}, {"GracefulSupervisorExit", dom},
		{"FinishTeardown", dom},
	} {
		modeltrace.Emit(dom, 1, a[0], a[1])
	}
	for _, a := range []string{"BootstrapRecoveryCoordinator", "RecoverSandbox", "RecoverSidecar", "RecoverStateAnchor", "FinishRecovery"} {
		modeltrace.EmitReconcile(dom, 1, a, dom)
	}
	modeltrace.Emit(dom, 2, "StartNewDomain", s2)
	return readRecorded(t, path)
}

func TestReplayRecordedRun(t *testing.T) {
	recs := recordRun(t)
	reps, err := ReplayLazaret(recs)
	if err != nil {
		t.Fatalf("recorded run rejected:\n%v", err)
	}
	if len(reps) != 1 || len(reps[0].Steps) != len(recs) {
		t.Fatalf("replay %+v", reps)
	}
	if got := reps[0].Steps[17]; got != "stutter: BootstrapRecoveryCoordinator(D1) (already done)" {
		t.Fatalf("a clean generation's bootstrap replays as %q", got)
	}
}

// Swapping two emitted events — the sandbox started before the sidecar
// is ready — is rejected at the first of them, readably.
func TestReplaySwappedEventsRejected(t *testing.T) {
	recs := recordRun(t)
	recs[4], recs[6] = recs[6], recs[4] // StartSidecar <-> StartSandbox
	_, err := ReplayLazaret(recs)
	var re *RejectError
	if !errors.As(err, &re) {
		t.Fatalf("swapped trace: want a RejectError, got %v", err)
	}
	msg := err.Error()
	t.Logf("%s", msg)
	if re.Line != 5 || re.Label != "StartSandbox(D1)" || len(re.Preceding) != 4 || re.Preceding[3] != "MountStateAnchor(D1)" {
		t.Fatalf("rejected at record %d (%s) after %v", re.Line, re.Label, re.Preceding)
	}
	for _, want := range []string{"rejected at record 5: StartSandbox(D1) recorded by rs", "not enabled", "preceding steps (4)",
		"  4 MountStateAnchor(D1)", `/\ sidecarState = D1 :> "Stopped"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	// A reordered teardown (unmount before the sandbox stopped) too.
	recs = recordRun(t)
	recs[12], recs[14] = recs[14], recs[12]
	if _, err := ReplayLazaret(recs); !errors.As(err, &re) || re.Label != "UnmountStateAnchor(D1)" {
		t.Fatalf("reordered teardown: %v", err)
	}
}

// A bootstrap after a coordinator killed with nobody observing it infers
// the loss; recovery of a Domain that is still running is refused.
func TestReplayBootstrapInference(t *testing.T) {
	recs := recordRun(t)
	// Generation 1 killed right after publication: its teardown is gone.
	cut := append(append([]modeltrace.Record{}, recs[:8]...), recs[17:]...)
	reps, err := ReplayLazaret(cut)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if s := strings.Join(reps[0].Steps, "\n"); !strings.Contains(s, "inferred: HardLoseHostCoordinator(D1)") {
		t.Fatalf("no inferred loss:\n%s", s)
	}
	// Without any recorded step of the second generation's coordinator
	// other than StartNewDomain, the first must have ended.
	noBoot := append(append([]modeltrace.Record{}, recs[:8]...), recs[22])
	if _, err := ReplayLazaret(noBoot); err == nil {
		t.Fatal("a new generation started while the previous one still ran")
	}
}

func TestReadRecordsRefusesNewerVersion(t *testing.T) {
	_, err := ReadRecords(strings.NewReader(`{"v":99,"seq":1,"model":"Lazaret","action":"StartNewDomain","role":"hc","pid":1,"domain":"d","generation":1}` + "\n"))
	if err == nil || !strings.Contains(err.Error(), "format version 99") {
		t.Fatalf("newer record accepted: %v", err)
	}
}

// recordEscalationRun emits, as the Host Coordinator does, one run whose
// session escalates twice: a command the developer approves at the prompt
// and runs on the host, then one a rule approves that is cancelled while it
// runs.
func recordEscalationRun(t *testing.T) []modeltrace.Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	t.Setenv(modeltrace.Env, path)
	if err := modeltrace.Start("hc", os.Getenv); err != nil {
		t.Fatal(err)
	}
	const dom, s1, r1, r2 = "8501ae07", "cli-101", "a1b2c3d4", "e5f6a7b8"
	emit := func(steps ...[]string) {
		for _, a := range steps {
			modeltrace.Emit(dom, 1, a[0], a[1:]...)
		}
	}
	emit([]string{"StartNewDomain", s1}, []string{"CreateTrustAnchor", dom}, []string{"StartRuntimeSupervisor", dom},
		[]string{"MountStateAnchor", dom}, []string{"StartSidecar", dom}, []string{"ArmRuntimeCausalEdge", dom},
		[]string{"StartSandbox", dom}, []string{"PublishDomain", dom}, []string{"AdvanceWaitingSession", s1},
		[]string{"RegisterSession", s1})
	modeltrace.EmitFacts(dom, 1, map[string]string{"session": s1}, "ReceiveEscalation", r1)
	emit([]string{"QueuePrompt", r1}, []string{"BeginPrompt", r1}, []string{"DeveloperApprove", r1, "9f86d081884c7d65"},
		[]string{"StartHostExecution", r1}, []string{"CompleteHostExecution", r1}, []string{"DeliverResult", r1})
	modeltrace.EmitFacts(dom, 1, map[string]string{"session": s1}, "ReceiveEscalation", r2)
	emit([]string{"AutoApprove", r2}, []string{"StartHostExecution", r2}, []string{"CancelRequest", r2}, []string{"DeliverResult", r2},
		[]string{"DisconnectSession", s1}, []string{"BeginTeardown", dom}, []string{"StopSandbox", dom}, []string{"StopSidecar", dom},
		[]string{"UnmountStateAnchor", dom}, []string{"GracefulSupervisorExit", dom}, []string{"FinishTeardown", dom})
	return readRecorded(t, path)
}

func TestReplayRecordedEscalations(t *testing.T) {
	recs := recordEscalationRun(t)
	reps, err := ReplayLazaret(recs)
	if err != nil {
		t.Fatalf("recorded escalations rejected:\n%v", err)
	}
	if len(reps) != 1 || len(reps[0].Steps) != len(recs) || len(reps[0].Config.Requests) != 2 {
		t.Fatalf("replay %+v", reps)
	}
	if got := reps[0].Steps[13]; got != "DeveloperApprove(R1, Approved1)" {
		t.Fatalf("the developer's approval replays as %q", got)
	}
	if !reps[0].Config.AutoRuleMatches[1] || reps[0].Config.AutoRuleMatches[0] {
		t.Fatalf("auto-approval facts: %v", reps[0].Config.AutoRuleMatches)
	}
}

// A host command started before the developer approved it — the two
// emitted steps swapped — is rejected at the start, readably; so is a
// result delivered while the command still runs.
func TestReplayReorderedEscalationRejected(t *testing.T) {
	recs := recordEscalationRun(t)
	recs[13], recs[14] = recs[14], recs[13] // DeveloperApprove <-> StartHostExecution
	_, err := ReplayLazaret(recs)
	var re *RejectError
	if !errors.As(err, &re) {
		t.Fatalf("reordered trace: want a RejectError, got %v", err)
	}
	msg := err.Error()
	t.Logf("%s", msg)
	if re.Line != 14 || re.Label != "StartHostExecution(R1)" || len(re.Preceding) != 13 || re.Preceding[12] != "BeginPrompt(R1)" {
		t.Fatalf("rejected at record %d (%s) after %v", re.Line, re.Label, re.Preceding)
	}
	for _, want := range []string{"rejected at record 14: StartHostExecution(R1) recorded by hc", "not enabled", "preceding steps (13)",
		"   13 BeginPrompt(R1)", `/\ requestPhase = R1 :> "AwaitingApproval"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q", want)
		}
	}
	recs = recordEscalationRun(t)
	recs[15], recs[16] = recs[16], recs[15] // CompleteHostExecution <-> DeliverResult
	if _, err := ReplayLazaret(recs); !errors.As(err, &re) || re.Label != "DeliverResult(R1)" {
		t.Fatalf("result before completion: %v", err)
	}
}

// recordManyRequests emits one run whose session escalates n times, each
// request auto-approved and run to completion before the next (the shape
// of TestSpec37EscalationCwdSwapStaysInWorkspace's thousand requests);
// with open, request 1 stays open while the others run.
func recordManyRequests(t *testing.T, n int, open bool) []modeltrace.Record {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	t.Setenv(modeltrace.Env, path)
	if err := modeltrace.Start("hc", os.Getenv); err != nil {
		t.Fatal(err)
	}
	const dom, s1 = "8501ae07", "cli-101"
	emit := func(a ...string) { modeltrace.Emit(dom, 1, a[0], a[1:]...) }
	for _, a := range [][]string{{"StartNewDomain", s1}, {"CreateTrustAnchor", dom}, {"StartRuntimeSupervisor", dom},
		{"MountStateAnchor", dom}, {"StartSidecar", dom}, {"ArmRuntimeCausalEdge", dom}, {"StartSandbox", dom},
		{"PublishDomain", dom}, {"AdvanceWaitingSession", s1}, {"RegisterSession", s1}} {
		emit(a...)
	}
	req := func(i int) string { return fmt.Sprintf("req-%03d", i) }
	for i := 1; i <= n; i++ {
		modeltrace.EmitFacts(dom, 1, map[string]string{"session": s1}, "ReceiveEscalation", req(i))
		emit("AutoApprove", req(i))
		emit("StartHostExecution", req(i))
		if open && i == 1 {
			continue
		}
		emit("CompleteHostExecution", req(i))
		emit("DeliverResult", req(i))
	}
	if open {
		emit("CompleteHostExecution", req(1))
		emit("DeliverResult", req(1))
	}
	for _, a := range [][]string{{"DisconnectSession", s1}, {"BeginTeardown", dom}, {"StopSandbox", dom}, {"StopSidecar", dom},
		{"UnmountStateAnchor", dom}, {"GracefulSupervisorExit", dom}, {"FinishTeardown", dom}} {
		emit(a...)
	}
	return readRecorded(t, path)
}

// More requests than the model state holds replay in overlapping request
// windows; a swapped step in a late request is still rejected, naming
// its window; requests that interleave too far apart are refused as
// beyond the model's bounds rather than replayed apart.
func TestReplayRequestWindows(t *testing.T) {
	recs := recordManyRequests(t, 20, false)
	reps, err := ReplayLazaret(recs)
	if err != nil {
		t.Fatalf("20 sequential requests rejected:\n%v", err)
	}
	if reps[0].Windows != 4 || reps[0].Steps[len(reps[0].Steps)-1] != "FinishTeardown(D1)" {
		t.Fatalf("windows %d, steps %v", reps[0].Windows, reps[0].Steps)
	}
	// Request 17: StartHostExecution before AutoApprove.
	for i := range recs {
		if recs[i].Action == "AutoApprove" && recs[i].Args[0] == "req-017" {
			recs[i], recs[i+1] = recs[i+1], recs[i]
			break
		}
	}
	_, err = ReplayLazaret(recs)
	var re *RejectError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Label, "StartHostExecution(") || !strings.Contains(err.Error(), "replay window of requests 13-20 of 20") {
		t.Fatalf("swapped step in request 17: %v", err)
	}
	if _, err := ReplayLazaret(recordManyRequests(t, 12, true)); err == nil || !strings.Contains(err.Error(), "beyond the model's bounds") {
		t.Fatalf("interleaving requests 11 apart: %v", err)
	}
}

// readRecorded reads the trace a test recorded at path, with the role of
// the process that records each step in a real run (this test process
// recorded them all).
func readRecorded(t *testing.T, path string) []modeltrace.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		switch recs[i].Action {
		case "MountStateAnchor", "ArmRuntimeCausalEdge", "StartSandbox":
			recs[i].Role = "rs"
		}
	}
	return recs
}

// TestReplayRetriedSession: a CLI whose coordinator is lost after its
// session registered starts the next generation itself as a new Client
// Session under the same trace name (its pid); the replay gives that
// session its own model session (S2), where the model's S1 has failed.
func TestReplayRetriedSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	t.Setenv(modeltrace.Env, path)
	if err := modeltrace.Start("hc", os.Getenv); err != nil {
		t.Fatal(err)
	}
	const dom, s1 = "8501ae07", "cli-101"
	for _, a := range [][]string{
		{"StartNewDomain", s1}, {"CreateTrustAnchor", dom}, {"StartRuntimeSupervisor", dom}, {"MountStateAnchor", dom},
		{"StartSidecar", dom}, {"ArmRuntimeCausalEdge", dom}, {"StartSandbox", dom}, {"PublishDomain", dom},
		{"AdvanceWaitingSession", s1}, {"RegisterSession", s1},
	} {
		modeltrace.Emit(dom, 1, a[0], a[1])
	}
	for _, a := range []string{"BootstrapRecoveryCoordinator", "RecoverSandbox", "RecoverSidecar", "RecoverStateAnchor", "FinishRecovery"} {
		modeltrace.EmitReconcile(dom, 1, a, dom)
	}
	modeltrace.Emit(dom, 2, "StartNewDomain", s1) // the same CLI, started again
	modeltrace.Emit(dom, 2, "CreateTrustAnchor", dom)
	recs := readRecorded(t, path)
	reps, err := ReplayLazaret(recs)
	if err != nil {
		t.Fatalf("a retried session rejected:\n%v", err)
	}
	last := reps[0].Steps[len(reps[0].Steps)-2]
	if last != "StartNewDomain(S2)" {
		t.Fatalf("the retried session replays as %q, want StartNewDomain(S2); steps %q", last, reps[0].Steps)
	}
	if recs[len(recs)-2].Args[0] != s1 {
		t.Fatalf("the replay changed the caller's records: %+v", recs[len(recs)-2])
	}
}
