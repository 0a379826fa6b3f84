package sandbox

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/store/storetest"
	"github.com/lazaret/lazaret/pkg/trust"
)

// live is a running process of this test standing in for RS, the attached
// runsc, or runsc's sandbox or gofer: a real pidfs identity of this boot.
type live struct {
	cmd *exec.Cmd
	id  pidfs.Identity
}

func spawn(t *testing.T) *live {
	t.Helper()
	c := exec.Command("/bin/sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	h, err := pidfs.Open(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l := &live{cmd: c, id: h.Identity()}
	t.Cleanup(l.stop)
	return l
}

func (l *live) stop() {
	if l.cmd.ProcessState == nil {
		l.cmd.Process.Kill()
		l.cmd.Wait()
	}
}

// generation is a fixture whose generation 1 is recorded (sandbox bare
// Intent) and bound to the Service, with a fake supervisor on the HC↔RS
// channel and four live processes for RS, the attached runsc and runsc's
// sandbox and gofer.
type generation struct {
	*fixture
	sup                 *supervisortest.Supervisor
	key                 ed25519.PublicKey
	rs, runsc, sbx, gof *live
	attached            int
	container           string
}

func newGeneration(t *testing.T, wait time.Duration) *generation {
	t.Helper()
	g := &generation{fixture: newFixture(t, wait), sup: supervisortest.New(t)}
	pub, key, _ := ed25519.GenerateKey(nil)
	g.key = pub
	g.s.cfg.Sign = func(record string, payload []byte) ([]byte, error) { return trust.Sign(key, record, payload), nil }
	g.s.cfg.Send = func(ctx context.Context, m *lv1.CoordinatorMessage) error { return g.sup.HC.Send(ctx, m) }
	g.s.cfg.Attach = func() error { g.attached++; return nil }
	g.rs, g.runsc, g.sbx, g.gof = spawn(t), spawn(t), spawn(t), spawn(t)
	g.fixture.rs = g.rs.id
	if err := g.store.Update(func(tx *store.Tx) error {
		if err := tx.CreateGeneration(store.NewGeneration{Number: 1, ConfigurationFingerprint: []byte("f"), CoordinatorID: "hc1", Coordinator: g.self}); err != nil {
			return err
		}
		return PutIntent(tx, 1)
	}); err != nil {
		t.Fatal(err)
	}
	g.container = runsc.ContainerID(string(g.domain), 1)
	g.s.Begin(Generation{Number: 1, CoordinatorID: "hc1"})
	if g.s.Container() != g.container {
		t.Fatalf("container %q, want %q", g.s.Container(), g.container)
	}
	return g
}

// deliver reads the message the fake supervisor sent from the
// coordinator's end, as the coordinator's phase machine does, and hands it
// to the role.
func (g *generation) deliver(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), supervisortest.DefaultWait)
	defer cancel()
	var m lv1.SupervisorMessage
	if err := g.sup.HC.Recv(ctx, &m); err != nil {
		t.Fatal(err)
	}
	return g.s.SupervisorMessage(ctx, &m)
}

func (g *generation) staged() *lv1.StagedProcessOwnership {
	return &lv1.StagedProcessOwnership{DomainId: string(g.domain), Generation: 1, CoordinatorId: "hc1", Slot: "attached_runsc", Identity: store.IdentityProto(g.runsc.id)}
}

func (g *generation) ready() *lv1.SandboxReady {
	return &lv1.SandboxReady{AttachedRunsc: store.IdentityProto(g.runsc.id), RunscSandbox: store.IdentityProto(g.sbx.id), RunscGofer: store.IdentityProto(g.gof.id), PreparedArtifactId: "a"}
}

// commit runs the sandbox's Commit in a transaction of its own.
func (g *generation) commit(r *lv1.SandboxReady) error {
	return g.s.cfg.Store.Update(func(tx *store.Tx) error { return g.s.Commit(tx, r) })
}

func (g *generation) participant(t *testing.T, gen uint64) *store.Participant {
	t.Helper()
	var p *store.Participant
	if err := g.store.View(func(tx *store.Tx) error {
		var err error
		p, err = tx.Participant(gen, participant.Sandbox)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (g *generation) slot(t *testing.T, name string) participant.Slot {
	t.Helper()
	return g.participant(t, 1).View.Slots[name]
}

// start takes the generation through RS staged, the attached runsc's
// staged ownership (acknowledged), SandboxReady and Commit.
func (g *generation) start(t *testing.T) {
	t.Helper()
	if err := g.s.SupervisorStaged(g.rs.id); err != nil {
		t.Fatal(err)
	}
	o := g.staged()
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatalf("staged attached runsc: %v", err)
	}
	ack := g.sup.ExpectAckOf(o)
	sig := ack.Signature
	ack.Signature = nil
	payload, err := fdpass.SigningPayload(ack)
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.Verify(g.key, trust.RecordProcessOwnershipCommitAck, payload, sig); err != nil {
		t.Fatalf("acknowledgement not signed as the coordinator: %v", err)
	}
	g.sup.Ready(g.ready())
	if err := g.deliver(t); err != nil {
		t.Fatalf("SandboxReady: %v", err)
	}
	if err := g.commit(g.ready()); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// TestStagedRunscAcknowledgedAndCommitted: RS's slot is recorded Staged
// when the broker spawns it; the attached runsc's staged ownership is
// recorded (RS Committed, runsc Staged) before the coordinator's signed
// exact echo, and only after Attach; SandboxReady naming it commits both
// with the container and runsc's sandbox and gofer.
func TestStagedRunscAcknowledgedAndCommitted(t *testing.T) {
	g := newGeneration(t, time.Second)
	if err := g.s.SupervisorStaged(g.rs.id); err != nil {
		t.Fatal(err)
	}
	if p := g.participant(t, 1); p.Phase != participant.Intent || p.View.Slots["supervisor"].State != participant.Staged || p.View.Slots["supervisor"].Identity != g.rs.id {
		t.Fatalf("after RS staged: %s %+v", p.Phase, p.View.Slots)
	}
	o := g.staged()
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	g.sup.ExpectAckOf(o)
	if g.attached != 1 {
		t.Fatalf("Attach ran %d times before the acknowledgement", g.attached)
	}
	if s := g.slot(t, "runsc"); s.State != participant.Staged || s.Identity != g.runsc.id {
		t.Fatalf("attached runsc slot %+v", s)
	}
	if s := g.slot(t, "supervisor"); s.State != participant.CommittedSlot {
		t.Fatalf("supervisor slot %+v", s)
	}
	if g.s.StagedRunsc() == nil || g.s.StagedRunsc().Identity.GetHostPid() != g.runsc.id.HostPID {
		t.Fatalf("StagedRunsc %v", g.s.StagedRunsc())
	}
	g.sup.Ready(g.ready())
	if err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	if err := g.commit(g.ready()); err != nil {
		t.Fatal(err)
	}
	p := g.participant(t, 1)
	if p.Phase != participant.Committed || p.Snapshot.GetSandbox().GetContainerId() != g.container {
		t.Fatalf("after commit: %s %v", p.Phase, p.Snapshot)
	}
	for name, want := range map[string]pidfs.Identity{"supervisor": g.rs.id, "runsc": g.runsc.id, "runsc_sandbox": g.sbx.id, "runsc_gofer": g.gof.id, "coordinator": g.self} {
		if s := p.View.Slots[name]; s.State != participant.CommittedSlot || s.Identity != want {
			t.Errorf("slot %s: %+v, want Committed %s", name, s, want)
		}
	}
	if g.s.Ready() == nil {
		t.Fatal("Ready not kept for status")
	}
	g.sup.ExpectSilence(100 * time.Millisecond)
}

// TestOutOfPhaseMessagesRefused: SandboxReady before the attached runsc
// was staged, a staged report for another generation or slot, a duplicate
// staged report, a SandboxReady naming another runsc, a Commit whose
// runsc children are RS or missing, and a message of another role are all
// refused, none acknowledged or recorded.
func TestOutOfPhaseMessagesRefused(t *testing.T) {
	g := newGeneration(t, time.Second)
	if err := g.s.SupervisorStaged(g.rs.id); err != nil {
		t.Fatal(err)
	}
	g.sup.Ready(g.ready())
	if err := g.deliver(t); err == nil || !strings.Contains(err.Error(), "not staged") {
		t.Fatalf("SandboxReady before staging: %v", err)
	}
	if err := g.commit(g.ready()); err == nil {
		t.Fatal("Commit before staging accepted")
	}
	for name, mut := range map[string]func(*lv1.StagedProcessOwnership){
		"other generation": func(o *lv1.StagedProcessOwnership) { o.Generation = 2 },
		"other slot":       func(o *lv1.StagedProcessOwnership) { o.Slot = "bogus" },
		"other boot":       func(o *lv1.StagedProcessOwnership) { o.Identity.BootId = make([]byte, 16) },
	} {
		o := g.staged()
		mut(o)
		g.sup.Staged(o)
		if err := g.deliver(t); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	g.sup.ExpectSilence(100 * time.Millisecond)
	if s := g.slot(t, "runsc"); s.State != participant.Unassigned {
		t.Fatalf("a refused report was recorded: %+v", s)
	}
	o := g.staged()
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	g.sup.ExpectAckOf(o)
	g.sup.Staged(g.staged())
	if err := g.deliver(t); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate staged: %v", err)
	}
	g.sup.ExpectSilence(100 * time.Millisecond)
	other := g.ready()
	other.AttachedRunsc = store.IdentityProto(g.sbx.id)
	g.sup.Ready(other)
	if err := g.deliver(t); err == nil {
		t.Fatal("SandboxReady naming another runsc accepted")
	}
	bad := g.ready()
	bad.RunscGofer = store.IdentityProto(g.rs.id)
	if err := g.commit(bad); err == nil || !strings.Contains(err.Error(), "runtime supervisor") {
		t.Fatalf("gofer = RS: %v", err)
	}
	bad = g.ready()
	bad.RunscSandbox = nil
	if err := g.commit(bad); err == nil {
		t.Fatal("no runsc sandbox identity accepted")
	}
	if p := g.participant(t, 1); p.Phase != participant.Intent {
		t.Fatalf("a refused SandboxReady committed the sandbox: %s", p.Phase)
	}
	g.sup.Progress("x")
	if err := g.deliver(t); err == nil {
		t.Fatal("another role's message accepted")
	}
}

// plantState writes runsc's state file for container naming pid.
func plantState(t *testing.T, root, container string, pid int) string {
	t.Helper()
	path := filepath.Join(root, container+"_sandbox:"+container+".state")
	body := fmt.Sprintf(`{"id":%q,"status":"running","goferPid":%d,"sandbox":{"id":%q,"pid":%d}}`, container, pid, container, pid)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReleaseAndCleanWithProof: Release records ReleaseIntent keeping
// every identity; Clean refuses while the attached runsc or runsc's
// children live (the record stays, runsc's state is kept, nothing is
// signalled), and once they are gone returns the proof — coordinator,
// attached runsc, sandbox and gofer — removes runsc's state, and MarkClean
// records Clean.
func TestReleaseAndCleanWithProof(t *testing.T) {
	g := newGeneration(t, 200*time.Millisecond)
	g.start(t)
	state := plantState(t, g.s.cfg.Runtime.Root, g.container, int(g.sbx.id.HostPID))
	if err := g.s.Release(); err != nil {
		t.Fatal(err)
	}
	if p := g.participant(t, 1); p.Phase != participant.ReleaseIntent || p.View.Slots["runsc"].Identity != g.runsc.id {
		t.Fatalf("after Release: %s %+v", p.Phase, p.View.Slots)
	}
	if _, err := g.s.Clean(nil); !errors.Is(err, ErrNotProven) {
		t.Fatalf("Clean with the attached runsc alive: %v", err)
	}
	g.runsc.stop()
	_, err := g.s.Clean(nil)
	var refused *RunscRefusal
	if !errors.As(err, &refused) || !errors.Is(err, ErrNotProven) {
		t.Fatalf("Clean with runsc's sandbox alive: %v", err)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("runsc state not kept: %v", err)
	}
	if done, _ := processDone(g.sbx); done {
		t.Fatal("the runsc sandbox stand-in was signalled")
	}
	if p := g.participant(t, 1); p.Phase != participant.ReleaseIntent {
		t.Fatalf("record moved without proof: %s", p.Phase)
	}
	g.sbx.stop()
	g.gof.stop()
	absent, err := g.s.Clean(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []pidfs.Authority{g.self.Authority, g.runsc.id.Authority, g.sbx.id.Authority, g.gof.id.Authority}
	if fmt.Sprint(absent) != fmt.Sprint(want) {
		t.Fatalf("proof %v, want %v", absent, want)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("runsc state not removed after proof: %v", err)
	}
	// RS (reaped by the coordinator, not proven here) is in the proof the
	// coordinator passes; without it the store refuses Clean.
	if err := g.s.MarkClean(1, "test", absent); err == nil {
		t.Fatal("Clean recorded without RS's absence")
	}
	g.rs.stop()
	if err := g.s.MarkClean(1, "test", append(absent, g.rs.id.Authority)); err != nil {
		t.Fatal(err)
	}
	if p := g.participant(t, 1); p.Phase != participant.Clean {
		t.Fatalf("after MarkClean: %s", p.Phase)
	}
}

func processDone(l *live) (bool, error) {
	h, err := pidfs.RecoveryMatch(l.id)
	if err != nil {
		return true, err
	}
	defer h.Close()
	return h.Terminated()
}

// TestRecoverDeadGeneration: a dead generation's Committed sandbox record
// whose RS still lives is retained (proven is not called, nothing is
// signalled); once RS and the attached runsc are gone but runsc's sandbox
// lives, it is still retained and runsc's state kept; with every process
// gone Recover returns the proof, removes runsc's state, and MarkClean
// records Clean; a Clean record is reported Clean.
func TestRecoverDeadGeneration(t *testing.T) {
	g := newGeneration(t, 200*time.Millisecond)
	g.start(t)
	state := plantState(t, g.s.cfg.Runtime.Root, g.container, int(g.gof.id.HostPID))
	// A new coordinator (another identity in the record: this test's
	// process stays the recorded coordinator, proven by identity).
	r := g.s.Recover(1, func() { t.Fatal("proven called while RS lives") })
	if !r.Retained() || r.Clean || !strings.Contains(r.Reason(), "supervisor") {
		t.Fatalf("RS alive: %+v", r)
	}
	if done, _ := processDone(g.rs); done {
		t.Fatal("RS stand-in was signalled")
	}
	g.rs.stop()
	g.runsc.stop()
	g.sbx.stop()
	proven := 0
	r = g.s.Recover(1, func() { proven++ })
	if !r.Retained() || proven != 1 || !strings.Contains(r.Reason(), "runsc_gofer") {
		t.Fatalf("gofer alive: %+v (proven %d)", r, proven)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("runsc state not kept: %v", err)
	}
	if done, _ := processDone(g.gof); done {
		t.Fatal("gofer stand-in was signalled")
	}
	g.gof.stop()
	r = g.s.Recover(1, func() { proven++ })
	if r.Retained() || r.Clean || len(r.Absent) != 5 {
		t.Fatalf("all gone: %+v", r)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("runsc state not removed: %v", err)
	}
	if err := g.s.MarkClean(1, "bootstrap recovery", r.Absent); err != nil {
		t.Fatal(err)
	}
	if r = g.s.Recover(1, nil); !r.Clean {
		t.Fatalf("Clean record: %+v", r)
	}
}

// TestRecoverBeforeSandboxReady: a generation that crashed after staging
// the attached runsc but before SandboxReady recorded runsc's children
// has only runsc's state file to go by: while its pids are held the record
// is retained and the state kept (the pid is never signalled); once free,
// recovery proves absence and RecoverStaleState has nothing to keep.
func TestRecoverBeforeSandboxReady(t *testing.T) {
	g := newGeneration(t, 200*time.Millisecond)
	if err := g.s.SupervisorStaged(g.rs.id); err != nil {
		t.Fatal(err)
	}
	o := g.staged()
	g.sup.Staged(o)
	if err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	g.sup.ExpectAckOf(o)
	state := plantState(t, g.s.cfg.Runtime.Root, g.container, int(g.sbx.id.HostPID))
	g.rs.stop()
	g.runsc.stop()
	r := g.s.Recover(1, nil)
	if !r.Retained() || !strings.Contains(r.Reason(), "never recorded") {
		t.Fatalf("state pid held: %+v", r)
	}
	var refused []string
	g.s.RecoverStaleState(func(uint64) bool { return false }, func(_ uint64, reason string) { refused = append(refused, reason) })
	if len(refused) != 1 {
		t.Fatalf("RecoverStaleState refusals %v", refused)
	}
	if done, _ := processDone(g.sbx); done {
		t.Fatal("the state file's pid was signalled")
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("runsc state not kept: %v", err)
	}
	g.sbx.stop()
	if r = g.s.Recover(1, nil); r.Retained() || len(r.Absent) != 3 {
		t.Fatalf("state pid free: %+v", r)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("runsc state not removed: %v", err)
	}
	g.s.RemoveRunscRootIfEmpty()
	if _, err := os.Stat(g.s.cfg.Runtime.Root); !os.IsNotExist(err) {
		t.Fatalf("empty runsc root kept: %v", err)
	}
}

// TestRecoverNewerRecordRefused: a sandbox record a newer build wrote is
// no proof that its processes are gone: recovery retains the generation,
// naming the record, and neither proves nor signals anything.
func TestRecoverNewerRecordRefused(t *testing.T) {
	g := newGeneration(t, 200*time.Millisecond)
	g.start(t)
	g.s.cfg.Store = storetest.NewerParticipant(t, g.store, g.dir, g.lock, 1, participant.Sandbox)
	r := g.s.Recover(1, func() { t.Fatal("proven called for a record this build cannot read") })
	if !r.Retained() || r.Clean || !strings.Contains(r.Reason(), "sandbox record") {
		t.Fatalf("newer record: %+v", r)
	}
	for _, p := range []*live{g.rs, g.runsc, g.sbx, g.gof} {
		if done, _ := processDone(p); done {
			t.Fatal("a recorded process was signalled")
		}
	}
}
