package network

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// testDomain is a real Domain Store in a temp dir with generation 1
// recorded, this test process as its coordinator.
type testDomain struct {
	dir  string   // the Domain Root (the store's)
	lock *os.File // its lifecycle lock
	st   *store.Store
	id   domain.ID
	self pidfs.Identity
}

func openDomain(t *testing.T) *testDomain {
	t.Helper()
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	d := &testDomain{dir: dir, lock: lock, id: domain.DeriveID("default", "/w")}
	if d.st, err = store.Open(dir, lock, store.DomainIdentity{ID: d.id, Profile: "default", CanonicalWorkspace: "/w"}, store.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.st.Close() })
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d.self = self.Identity()
	self.Close()
	d.update(t, "generation", func(tx *store.Tx) error {
		if err := tx.CreateGeneration(store.NewGeneration{Number: 1, ConfigurationFingerprint: []byte("cfg"), CoordinatorID: "hc-1",
			ComponentIDs: []store.ComponentID{{Kind: "network_sidecar", ID: "sc-1"}}, Coordinator: d.self}); err != nil {
			return err
		}
		return tx.PutParticipant(1, participant.Sandbox, participant.Intent, nil)
	})
	return d
}

func (d *testDomain) update(t *testing.T, what string, fn func(tx *store.Tx) error) {
	t.Helper()
	if err := d.st.Update(fn); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (d *testDomain) participant(t *testing.T, role participant.Role) *store.Participant {
	t.Helper()
	var p *store.Participant
	if err := d.st.View(func(tx *store.Tx) (err error) { p, err = tx.Participant(1, role); return err }); err != nil {
		t.Fatalf("%s: %v", role, err)
	}
	return p
}

// commitSupervisor records rs as the sandbox's committed supervisor (as
// the coordinator does once RS is staged), the direct owner the helper
// and network participants name.
func (d *testDomain) commitSupervisor(t *testing.T, rs pidfs.Identity) {
	t.Helper()
	snap := func(slot *lv1.ProcessSlotV1) *lv1.RoleSnapshotV1 {
		return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Sandbox{Sandbox: &lv1.SandboxSnapshotV1{Coordinator: store.CommittedSlot(d.self), Supervisor: slot}}}
	}
	d.update(t, "stage rs", func(tx *store.Tx) error {
		return tx.PutParticipant(1, participant.Sandbox, participant.Intent, snap(store.StagedSlot(rs)))
	})
	d.update(t, "commit rs", func(tx *store.Tx) error {
		return tx.PutParticipant(1, participant.Sandbox, participant.Intent, snap(store.CommittedSlot(rs)))
	})
}

// process is a real child process with its pidfs identity.
type process struct {
	cmd *exec.Cmd
	id  pidfs.Identity
}

func startProcess(t *testing.T) *process {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h, err := pidfs.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p := &process{cmd: cmd, id: h.Identity()}
	t.Cleanup(p.end)
	return p
}

func (p *process) end() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// absence is the coordinator's recovery proof without its stop: a
// recorded process that still runs is reported, not killed.
var absence = supervisortest.Absence(100*time.Millisecond, pidfs.Identity{})
