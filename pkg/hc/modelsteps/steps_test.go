package modelsteps

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// trace turns recording on into a fresh file for the test binary (the
// recorder is process-wide: the file is reread from offset, per test).
var tracePath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "modelsteps")
	if err != nil {
		panic(err)
	}
	tracePath = filepath.Join(dir, "trace.jsonl")
	if err := modeltrace.Start("hc", func(k string) string {
		if k == modeltrace.Env {
			return tracePath
		}
		return ""
	}); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// record runs f and returns the actions it recorded (reconcile steps
// marked with a "~" prefix).
func record(t *testing.T, f func()) []string {
	t.Helper()
	before, _ := os.Stat(tracePath)
	var off int64
	if before != nil {
		off = before.Size()
	}
	f()
	fh, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	fh.Seek(off, 0)
	var out []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var r modeltrace.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		a := r.Action
		if r.Reconcile {
			a = "~" + a
		}
		out = append(out, a)
	}
	return out
}

func expect(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recorded\n  %v\nwant\n  %v", got, want)
	}
}

// TestOrderedTeardown: a generation published, joined, left and stopped
// in order is the model's ordered teardown.
func TestOrderedTeardown(t *testing.T) {
	var s Steps
	got := record(t, func() {
		s.Bind("d", 2)
		s.StartDomain(1, false, "cli-1")
		s.SupervisorStarted()
		s.Admit("cli-1", false) // already waiting: nothing new
		s.Publish()
		s.Register("cli-1")
		s.Admit("cli-2", true)
		if !s.Attached("cli-1") || !s.Attached("cli-2") {
			t.Error("registered sessions not attached")
		}
		s.Disconnect("cli-2")
		s.Disconnect("cli-2") // closed already: nothing
		s.Teardown()
		s.SupervisorGone(pidfs.ExitStatus{Exited: true}, true, false)
		s.Finish()
	})
	expect(t, got,
		"~BootstrapRecoveryCoordinator", "~RecoverSandbox", "~RecoverSidecar", "~RecoverStateAnchor", "~FinishRecovery",
		"StartNewDomain", "StartRuntimeSupervisor", "PublishDomain", "AdvanceWaitingSession", "RegisterSession",
		"StartReadySession", "RegisterSession", "DisconnectSession",
		"DisconnectSession", "BeginTeardown",
		"StopSandbox", "StopSidecar", "UnmountStateAnchor", "GracefulSupervisorExit", "FinishTeardown")
}

// TestSupervisorLoss: a SIGKILL this coordinator did not send is the
// environment's hard loss of RS, and the end is recovery.
func TestSupervisorLoss(t *testing.T) {
	var s Steps
	got := record(t, func() {
		s.Bind("d", 1)
		s.StartDomain(0, false, "cli-1")
		s.SupervisorStarted()
		s.SupervisorGone(pidfs.ExitStatus{Signal: unix.SIGKILL}, false, false)
		s.SupervisorGone(pidfs.ExitStatus{Signal: unix.SIGKILL}, false, false) // gone already: nothing
		s.Finish()
	})
	expect(t, got, "StartNewDomain", "StartRuntimeSupervisor", "HardLoseRuntimeSupervisor",
		"BeginRecovery", "~RecoverSandbox", "~RecoverSidecar", "~RecoverStateAnchor", "FinishRecovery")
}

// TestCoordinatorKill: RS killed by this coordinator (or ending without
// SupervisorStopped) fails the Domain and terminates the runtime.
func TestCoordinatorKill(t *testing.T) {
	var s Steps
	got := record(t, func() {
		s.Bind("d", 1)
		s.StartDomain(0, false, "cli-1")
		s.SupervisorStarted()
		s.Publish()
		s.Teardown()
		s.SupervisorGone(pidfs.ExitStatus{Signal: unix.SIGKILL}, false, true)
		s.Finish()
	})
	expect(t, got, "StartNewDomain", "StartRuntimeSupervisor", "PublishDomain", "DisconnectSession", "BeginTeardown",
		"FailDomain", "HostCoordinatorTerminateUnresponsiveRuntime",
		"BeginRecovery", "~RecoverSandbox", "~RecoverSidecar", "~RecoverStateAnchor", "FinishRecovery")
}

// TestLostLeaderAndMismatch: the starting session leaving before
// publication fails the Domain (no further session steps); a mismatched
// session is rejected only while the generation lives; a retained
// previous generation begins recovery only.
func TestLostLeaderAndMismatch(t *testing.T) {
	var s Steps
	got := record(t, func() {
		s.Bind("d", 3)
		s.StartDomain(2, true, "cli-1")
		s.RejectMismatch("cli-9")
		s.RejectMismatch("cli-9") // seen: nothing
		s.Disconnect("cli-1")
		s.Admit("cli-3", true) // failed: nothing
		s.RejectMismatch("cli-4")
		s.Fail() // failed already: nothing
		s.Finish()
	})
	expect(t, got, "~BootstrapRecoveryCoordinator", "StartNewDomain", "RejectConfigurationMismatch", "DisconnectSession",
		"BeginRecovery", "~RecoverSandbox", "~RecoverSidecar", "~RecoverStateAnchor", "FinishRecovery")
	if s.Attached("cli-1") {
		t.Error("a session of a failed Domain is attached")
	}
}
