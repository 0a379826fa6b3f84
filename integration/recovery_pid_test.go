package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/runsc"
)

// TestSpec32RecoveryNeverSignalsRecycledPID (spec §3.2 "no numeric-PID
// signal", FR-7): after a crash leaves runsc's state behind, the pids in it
// may name unrelated processes of the developer once the numbers are
// reused. The test makes that happen: both the Runtime Supervisor and the
// Host Coordinator are killed (two failpoints), then runsc's state file is
// rewritten so that its sandbox and gofer pids name a `sleep` of the test
// user — the recycled-pid attack. The next `lazaret run` recovers.
//
//   - recorded: the crash comes at teardown, after the sandbox and gofer
//     identities were recorded; recovery proves those recorded processes
//     gone, removes the state, leaves the sleep alone and ends Clean.
//   - unrecorded: the crash comes right after the sandbox booted, before its
//     identities were recorded; recovery cannot tell the sleep from the
//     sandbox, so it must not signal it: it keeps the runsc state, reports
//     the pid in hc.log and still starts the new generation; once the pid
//     is free the next run cleans up.
//
// Before the fix, recovery ran `runsc delete -force`, which SIGKILLed the
// sleep in both cases.
func TestSpec32RecoveryNeverSignalsRecycledPID(t *testing.T) {
	parallel(t)
	e := needFailpoints(t)
	for _, tc := range []struct {
		name, rsStage string
		recorded      bool
	}{
		{"recorded", "lazaret-rs:stop-requested", true},
		{"unrecorded", "lazaret-rs:runsc-ready", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := workspace(t)
			if !tc.recorded {
				expectModelGap(t, gapRetainedGeneration)
			}
			stages := tc.rsStage + ",lazaret-hc:rs-stopped"
			c := e.cmdWith(e.binFP, ws, []string{failpoint.Env + "=" + stages}, "run", "-p", "tiny", "--", "echo", "hi")
			var errb bytes.Buffer
			c.Stderr = &errb
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(90 * time.Second):
				c.Process.Kill()
				<-done
				t.Fatalf("faulted run did not end; stderr %q", errb.String())
			}
			noProcessesOrMounts(t)
			canon, _ := filepath.EvalSymlinks(ws)
			id := domain.DeriveID("tiny", canon)
			hcLog := filepath.Join(e.stateHome, "lazaret", "domains", string(id), "hc.log")
			logb, _ := os.ReadFile(hcLog)
			for _, st := range strings.Split(stages, ",") {
				if !strings.Contains(string(logb), "failpoint hit: "+st) && !strings.Contains(errb.String(), "failpoint hit: "+st) {
					t.Fatalf("stage %s was never reached (stderr %q)", st, errb.String())
				}
			}
			root := filepath.Join(e.runtime, "lazaret", string(id), "runsc")
			container := runsc.ContainerID(string(id), 1)
			statePath := filepath.Join(root, container+"_sandbox:"+container+".state")
			if _, _, err := statePids(statePath); err != nil {
				t.Fatalf("the crash left no runsc state to attack (%v): the scenario is vacuous", err)
			}

			// The unrelated process of the developer at the recycled pid.
			victim := exec.Command("/bin/sleep", "600")
			victim.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}, Setpgid: true}
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			victimGone := make(chan struct{})
			go func() { victim.Wait(); close(victimGone) }()
			stopVictim := func() {
				victim.Process.Kill() // a process this test started, by its pid
				<-victimGone
			}
			defer func() {
				select {
				case <-victimGone:
				default:
					stopVictim()
				}
			}()
			rewriteStatePids(t, statePath, victim.Process.Pid)
			if sb, gofer, err := statePids(statePath); err != nil || sb != victim.Process.Pid || gofer != victim.Process.Pid {
				t.Fatalf("planted state: sandbox %d gofer %d, %v", sb, gofer, err)
			}

			r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "recovered")
			select {
			case <-victimGone:
				t.Fatalf("recovery signalled pid %d, the unrelated process runsc's state file named (%s): run %+v", victim.Process.Pid, victim.ProcessState, r)
			case <-time.After(500 * time.Millisecond):
			}
			if r.code != 0 || r.stdout != "recovered\n" {
				t.Fatalf("run after the crash: %+v", r)
			}
			if tc.recorded {
				if _, err := os.Stat(statePath); !os.IsNotExist(err) {
					t.Errorf("runsc state of the recovered generation left: %v", err)
				}
				stopVictim()
				noLeftovers(t)
				allClean(t, ws, "tiny")
				return
			}
			// Fail closed: the state stays, the refusal names the pid and
			// the fix, and the new generation still ran.
			if _, err := os.Stat(statePath); err != nil {
				t.Fatalf("runsc state naming an unproven live pid was removed: %v", err)
			}
			logb, _ = os.ReadFile(hcLog)
			want := fmt.Sprintf("names live pid %d", victim.Process.Pid)
			if !strings.Contains(string(logb), want) || !strings.Contains(string(logb), "not signalled") {
				t.Fatalf("hc.log does not report the kept runsc state (%q):\n%s", want, lastLines(string(logb), 40))
			}
			stopVictim()
			if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "again"); r.code != 0 || r.stdout != "again\n" {
				t.Fatalf("run once the pid is free: %+v", r)
			}
			if _, err := os.Stat(statePath); !os.IsNotExist(err) {
				t.Errorf("runsc state left once its pids were free: %v", err)
			}
			noLeftovers(t)
			allClean(t, ws, "tiny")
		})
	}
}

// statePids reads the sandbox and gofer pids of a runsc state file.
func statePids(path string) (sandbox, gofer int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var doc struct {
		GoferPid int `json:"goferPid"`
		Sandbox  struct {
			Pid int `json:"pid"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, 0, err
	}
	return doc.Sandbox.Pid, doc.GoferPid, nil
}

// rewriteStatePids points the sandbox and gofer pids of a runsc state file
// at pid, keeping every other field and the file's owner.
func rewriteStatePids(t *testing.T, path string, pid int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	sb, ok := doc["sandbox"].(map[string]any)
	if !ok {
		t.Fatalf("state file without a sandbox object: %s", b)
	}
	sb["pid"] = pid
	doc["goferPid"] = pid
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o640); err != nil {
		t.Fatal(err)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
