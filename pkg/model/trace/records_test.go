package trace

import (
	"errors"
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
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	// The trace's roles are the recording processes'.
	for i := range recs {
		switch recs[i].Action {
		case "MountStateAnchor", "ArmRuntimeCausalEdge", "StartSandbox":
			recs[i].Role = "rs"
		}
	}
	return recs
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
