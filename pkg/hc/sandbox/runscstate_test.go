package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
)

// TestReconcileRunscNeverSignalsStatePids (FR-7): runsc's state file names
// a live, unrelated process as the sandbox and gofer (a recycled pid).
// With recorded identities, ReconcileRunsc proves the recorded processes
// gone through PidfsRecoveryMatch and removes the state, never touching the
// live one. Without them it waits, refuses (naming the pid and the fix),
// keeps the state and still does not signal; once the pid is free the same
// call proves absence and removes the state.
func TestReconcileRunscNeverSignalsStatePids(t *testing.T) {
	f := newFixture(t, 300*time.Millisecond)
	s, runtimeDir, root := f.s, f.runtimeDir, f.s.cfg.Runtime.Root
	if err := f.store.Update(func(tx *store.Tx) error {
		return tx.CreateGeneration(store.NewGeneration{Number: 1, ConfigurationFingerprint: []byte("f"), CoordinatorID: "hc", Coordinator: f.self})
	}); err != nil {
		t.Fatal(err)
	}

	// The recorded sandbox and gofer: processes that have exited since.
	var gone []pidfs.Identity
	for i := 0; i < 2; i++ {
		p := exec.Command("/bin/true")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		h, err := pidfs.Open(p.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		gone = append(gone, h.Identity())
		h.Close()
		p.Wait() // reaped by os/exec in this test only
	}
	victim := exec.Command("/bin/sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer victim.Wait()
	defer victim.Process.Kill()
	vh, err := pidfs.Open(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer vh.Close()
	container := runsc.ContainerID(string(f.domain), 1)
	statePath := filepath.Join(root, container+"_sandbox:"+container+".state")
	plant := func() {
		t.Helper()
		body := fmt.Sprintf(`{"id":%q,"status":"running","goferPid":%d,"sandbox":{"id":%q,"pid":%d}}`, container, victim.Process.Pid, container, victim.Process.Pid)
		if err := os.WriteFile(statePath, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	victimAlive := func(when string) {
		t.Helper()
		if done, err := vh.Terminated(); err != nil || done {
			t.Fatalf("%s: the process at the state file's pid was ended (terminated=%v err=%v)", when, done, err)
		}
	}

	plant()
	recorded := map[string]participant.Slot{
		"runsc_sandbox": {State: participant.CommittedSlot, Identity: gone[0]},
		"runsc_gofer":   {State: participant.CommittedSlot, Identity: gone[1]},
	}
	absent, refusals := s.ReconcileRunsc(1, container, recorded)
	if len(refusals) != 0 || len(absent) != 2 || absent[0] != gone[0].Authority || absent[1] != gone[1].Authority {
		t.Fatalf("recorded: absent %v refusals %v", absent, refusals)
	}
	victimAlive("recorded identities")
	if _, err := os.Stat(statePath); !os.IsNotExist(err) {
		t.Fatalf("runsc state not removed after proven absence: %v", err)
	}

	plant()
	absent, refusals = s.ReconcileRunsc(1, container, nil)
	if len(refusals) != 1 || len(absent) != 0 {
		t.Fatalf("unrecorded: absent %v refusals %v", absent, refusals)
	}
	for _, want := range []string{fmt.Sprint(victim.Process.Pid), "never recorded", "not signalled", root} {
		if !strings.Contains(refusals[0], want) {
			t.Errorf("refusal %q does not say %q", refusals[0], want)
		}
	}
	victimAlive("unrecorded identities")
	if _, err := os.Stat(statePath); err != nil {
		t.Fatalf("runsc state not kept after a refusal: %v", err)
	}
	if keep := KeptRunscState(root); !keep[container] {
		t.Fatalf("kept state %v", keep)
	}
	os.WriteFile(filepath.Join(runtimeDir, "other"), nil, 0o600)
	os.WriteFile(filepath.Join(root, "null-netns"), nil, 0o600)
	RemoveRuntimeExceptRunscState(s.log, runtimeDir, root)
	if ents, _ := os.ReadDir(runtimeDir); len(ents) != 1 || ents[0].Name() != "runsc" {
		t.Fatalf("runtime dir after cleanup: %v", ents)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 || ents[0].Name() != filepath.Base(statePath) {
		t.Fatalf("runsc root after cleanup: %v", ents)
	}

	victim.Process.Kill()
	victim.Wait()
	if absent, refusals = s.ReconcileRunsc(1, container, nil); len(refusals) != 0 {
		t.Fatalf("after the pid is free: %v", refusals)
	}
	if _, err := os.Stat(statePath); !os.IsNotExist(err) {
		t.Fatalf("runsc state not removed once the pid was free: %v", err)
	}
	RemoveRuntimeExceptRunscState(s.log, runtimeDir, root)
	if _, err := os.Stat(runtimeDir); !os.IsNotExist(err) {
		t.Fatalf("runtime dir left with no runsc state to keep: %v", err)
	}
}
