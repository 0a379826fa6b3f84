package gitrouting

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/store/storetest"
)

// supervised is a roleEnv on the real HC↔RS channel: a fake Runtime
// Supervisor sends the daemon's signed staged ownership and SandboxReady,
// and receives the role's acknowledgement as the coordinator's ackStaged
// sends it (the exact echo, signed with the coordinator's key).
type supervised struct {
	*roleEnv
	sup   *supervisortest.Supervisor
	coord ed25519.PublicKey  // verifies the acknowledgement
	rs    ed25519.PrivateKey // signs RS's staged reports
}

func newSupervised(t *testing.T) *supervised {
	t.Helper()
	g := &supervised{roleEnv: newRole(t), sup: supervisortest.New(t)}
	pub, key, _ := ed25519.GenerateKey(nil)
	_, g.rs, _ = ed25519.GenerateKey(nil)
	g.coord = pub
	g.s.cfg.Ack = g.sup.Acker(key)
	return g
}

// signedStaged is RS's signed report of the daemon's staged ownership.
func (g *supervised) signedStaged(t *testing.T) *lv1.StagedProcessOwnership {
	t.Helper()
	o := g.staged()
	o.DomainId, o.CoordinatorId = "d", "hc-1"
	o, err := supervisortest.Sign(g.rs, o)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// deliver reads RS's next message on the coordinator's end and hands it
// to the role as the coordinator's exchange does (pkg/hc supervisor.go):
// a git_routing Staged report to CommitStaged, SandboxReady to Ready.
func (g *supervised) deliver(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), supervisortest.DefaultWait)
	defer cancel()
	var m lv1.SupervisorMessage
	if err := g.sup.HC.Recv(ctx, &m); err != nil {
		t.Fatalf("coordinator end: %v", err)
	}
	switch m.GetMsg().(type) {
	case *lv1.SupervisorMessage_Staged:
		return g.s.CommitStaged(m.GetStaged())
	case *lv1.SupervisorMessage_Ready:
		return g.recordReady(m.GetReady())
	}
	return fmt.Errorf("the Git-routing role does not take %T", m.GetMsg())
}

// alive reports whether the daemon stand-in still runs (nothing signalled
// it).
func (g *supervised) alive(t *testing.T) bool {
	t.Helper()
	h, err := pidfs.RecoveryMatch(g.id)
	if err != nil {
		return false
	}
	defer h.Close()
	done, err := h.Terminated()
	return err == nil && !done
}

// start runs Start and takes the daemon through RS's staged report
// (acknowledged) and SandboxReady: the participant is Prepared.
func (g *supervised) start(t *testing.T) {
	t.Helper()
	var sb ocispec.Sandbox
	if _, err := g.s.Start(&sb); err != nil {
		t.Fatal(err)
	}
	o := g.signedStaged(t)
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatalf("staged daemon: %v", err)
	}
	g.sup.ExpectSignedAckOf(g.coord, o)
	g.sup.Ready(g.ready())
	if err := g.deliver(t); err != nil {
		t.Fatalf("SandboxReady: %v", err)
	}
}

// TestSupervisorDrivenLifecycle: the daemon's staged report from RS is
// recorded Staged before the exact signed echo goes back; SandboxReady
// records the participant Prepared with the daemon committed and its
// mount; nothing is sent for it. Release keeps the identity; Clean
// refuses while the daemon lives (signalling nothing) and records Clean
// once it is gone.
func TestSupervisorDrivenLifecycle(t *testing.T) {
	g := newSupervised(t)
	var sb ocispec.Sandbox
	if _, err := g.s.Start(&sb); err != nil {
		t.Fatal(err)
	}
	o := g.signedStaged(t)
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	if ph, sl := g.phase(t); ph != participant.Intent || sl.State != participant.Staged || sl.Identity != g.id {
		t.Fatalf("after the staged report: %s %s", ph, sl)
	}
	g.sup.ExpectSignedAckOf(g.coord, o)
	g.sup.Ready(g.ready())
	if err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	var p *store.Participant
	if err := g.st.View(func(tx *store.Tx) (err error) { p, err = tx.Participant(1, participant.GitRouting); return err }); err != nil {
		t.Fatal(err)
	}
	mnt := p.Snapshot.GetGitRouting().GetMount()
	if sl := p.View.Slots["daemon"]; p.Phase != participant.Prepared || sl.State != participant.CommittedSlot || sl.Identity != g.id {
		t.Fatalf("after SandboxReady: %s %s", p.Phase, sl)
	}
	if mnt.GetMountId() != 7 || mnt.GetFsDev() != 42 || mnt.GetMountPoint().GetDev() != 8 || mnt.GetMountPoint().GetIno() != 9 || mnt.GetMountPoint().GetPathHint() != "/routed" {
		t.Fatalf("mount identity %v", mnt)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	if err := g.s.Release(); err != nil {
		t.Fatal(err)
	}
	if ph, sl := g.phase(t); ph != participant.ReleaseIntent || sl.Identity != g.id {
		t.Fatalf("after Release: %s %s", ph, sl)
	}
	if err := Clean(g.st, 1, "normal teardown", absence); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("Clean with the daemon alive: %v", err)
	}
	if ph, _ := g.phase(t); ph != participant.ReleaseIntent || !g.alive(t) {
		t.Fatalf("refused Clean: record %s, daemon alive %v", ph, g.alive(t))
	}
	g.stopDaemon()
	if err := Clean(g.st, 1, "normal teardown", absence); err != nil {
		t.Fatal(err)
	}
	if ph, sl := g.phase(t); ph != participant.Clean || sl.State != participant.Unassigned {
		t.Fatalf("after Clean: %s %s", ph, sl)
	}
}

// TestSupervisorMessagesOutOfState: a staged report before Start asked for
// the daemon, SandboxReady before the daemon was staged, a staged report
// of another boot, a duplicate staged report, SandboxReady naming another
// daemon, and SandboxReady after Release are refused with an error that
// says why; none is acknowledged or recorded, and a refused report leaves
// the role ready for the valid one.
func TestSupervisorMessagesOutOfState(t *testing.T) {
	g := newSupervised(t)
	g.sup.Staged(g.signedStaged(t))
	if err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "did not ask") {
		t.Fatalf("staged before Start: %v", err)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	var sb ocispec.Sandbox
	if _, err := g.s.Start(&sb); err != nil {
		t.Fatal(err)
	}
	g.sup.Ready(g.ready())
	if err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "not staged") {
		t.Fatalf("SandboxReady before staging: %v", err)
	}
	other := g.staged()
	other.Identity.BootId = make([]byte, 16)
	g.sup.Staged(other)
	if err := g.deliver(t); err == nil {
		t.Fatal("staged daemon of another boot accepted")
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	if ph, sl := g.phase(t); ph != participant.Intent || sl.State != participant.Unassigned {
		t.Fatalf("a refused report was recorded: %s %s", ph, sl)
	}
	o := g.signedStaged(t)
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatalf("valid staged report after a refused one: %v", err)
	}
	g.sup.ExpectSignedAckOf(g.coord, o)
	g.sup.Staged(g.signedStaged(t))
	if err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate staged report: %v", err)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	wrong := g.ready()
	wrong.GitRouting.Daemon = store.IdentityProto(g.self(t))
	g.sup.Ready(wrong)
	if err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("SandboxReady naming another daemon: %v", err)
	}
	if ph, _ := g.phase(t); ph != participant.Intent {
		t.Fatalf("a refused SandboxReady moved the record: %s", ph)
	}
	g.sup.Progress("not this role's")
	if err := g.deliver(t); err == nil {
		t.Fatal("another role's message accepted")
	}
	if err := g.s.Release(); err != nil {
		t.Fatal(err)
	}
	g.sup.Ready(g.ready())
	if err := g.deliver(t); err == nil {
		t.Fatal("SandboxReady after Release accepted")
	}
	if ph, sl := g.phase(t); ph != participant.ReleaseIntent || sl.State != participant.Staged {
		t.Fatalf("after the refused late SandboxReady: %s %s", ph, sl)
	}
}

func (g *supervised) self(t *testing.T) pidfs.Identity {
	t.Helper()
	var gen *store.Generation
	if err := g.st.View(func(tx *store.Tx) (err error) { gen, err = tx.Generation(1); return err }); err != nil {
		t.Fatal(err)
	}
	return gen.Coordinator.Identity
}

// TestRecoverDeadGeneration: the coordinator died with the daemon
// Prepared; the next coordinator (the store reopened) retains the record
// while the daemon is not proven absent, signalling nothing, and records
// Clean with the proof once it is; a second recovery has nothing to do.
func TestRecoverDeadGeneration(t *testing.T) {
	g := newSupervised(t)
	g.start(t)
	st := storetest.Reopen(t, g.st, g.dir, g.lock)
	g.st = st
	if err := Clean(st, 1, "bootstrap recovery", absence); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("recovery with the daemon alive: %v", err)
	}
	if ph, sl := g.phase(t); ph != participant.Prepared || sl.Identity != g.id || !g.alive(t) {
		t.Fatalf("retained record %s %s, daemon alive %v", ph, sl, g.alive(t))
	}
	g.stopDaemon()
	if err := Clean(st, 1, "bootstrap recovery", absence); err != nil {
		t.Fatal(err)
	}
	if ph, _ := g.phase(t); ph != participant.Clean {
		t.Fatalf("after recovery: %s", ph)
	}
	if err := Clean(st, 1, "bootstrap recovery", func(pidfs.Identity) error { t.Fatal("a Clean record's daemon was checked"); return nil }); err != nil {
		t.Fatalf("second recovery: %v", err)
	}
}

// TestRecoverNewerRecordRefused: a record a newer build wrote is refused
// (ErrRefused, naming its record version) before any process is matched,
// and stays as it is.
func TestRecoverNewerRecordRefused(t *testing.T) {
	g := newSupervised(t)
	g.start(t)
	g.stopDaemon()
	g.st = storetest.NewerParticipant(t, g.st, g.dir, g.lock, 1, participant.GitRouting)
	err := Clean(g.st, 1, "bootstrap recovery", func(pidfs.Identity) error { t.Fatal("a newer record's daemon was matched"); return nil })
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "record_version") {
		t.Fatalf("recovery of a newer record: %v", err)
	}
	if err := g.st.View(func(tx *store.Tx) error { _, err := tx.Participant(1, participant.GitRouting); return err }); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("the newer record was rewritten: %v", err)
	}
}
