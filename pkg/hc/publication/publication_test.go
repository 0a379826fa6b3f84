package publication

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// roleEnv is the role over a real Domain Store in a temp dir with
// generation 1 recorded (this test process its coordinator) and a real
// control socket and publication file in a temp runtime directory.
type roleEnv struct {
	dir  string
	lock *os.File // the Domain's lifecycle lock (dir's)
	st   *store.Store
	s    *Service
	cfg  Config
	rs   pidfs.Identity
	// sandbox records the sandbox participant in phase.
	sandbox func(participant.Phase) error
}

func newRole(t *testing.T) *roleEnv {
	t.Helper()
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	id := domain.DeriveID("default", "/w")
	st, err := store.Open(dir, lock, store.DomainIdentity{ID: id, Profile: "default", CanonicalWorkspace: "/w"}, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if err := st.Update(func(tx *store.Tx) error {
		return tx.CreateGeneration(store.NewGeneration{Number: 1, ConfigurationFingerprint: []byte("cfg"), CoordinatorID: "hc-1", Coordinator: self.Identity()})
	}); err != nil {
		t.Fatal(err)
	}
	// Stand-ins for the supervisor and runsc: identities on this boot that
	// the sandbox record names; the publication never checks them.
	rs := self.Identity()
	rs.Ino, rs.HostPID = rs.Ino+1000, rs.HostPID+1000
	run := rs
	run.Ino, run.HostPID = run.Ino+1, run.HostPID+1
	e := &roleEnv{dir: dir, lock: lock, st: st, rs: rs}
	e.cfg = Config{Store: st, Generation: 1, Fingerprint: "cfg", Socket: filepath.Join(dir, "control.sock"), File: filepath.Join(dir, "publication.json"),
		Now: func() time.Time { return time.Unix(1_800_000_000, 0) }}
	e.s = New(e.cfg)
	t.Cleanup(e.s.Withdraw)
	// The sandbox's acquisition as the coordinator records it: RS staged
	// then committed, runsc staged, then the sandbox Committed.
	e.sandbox = func(phase participant.Phase) error {
		ctr := "ctr-1"
		steps := []struct {
			phase participant.Phase
			snap  *lv1.SandboxSnapshotV1
		}{
			{participant.Intent, &lv1.SandboxSnapshotV1{Supervisor: store.StagedSlot(rs)}},
			{participant.Intent, &lv1.SandboxSnapshotV1{Supervisor: store.CommittedSlot(rs)}},
			{participant.Intent, &lv1.SandboxSnapshotV1{Supervisor: store.CommittedSlot(rs), Runsc: store.StagedSlot(run), ContainerId: &ctr}},
		}
		if phase == participant.Committed {
			steps = append(steps, struct {
				phase participant.Phase
				snap  *lv1.SandboxSnapshotV1
			}{participant.Committed, &lv1.SandboxSnapshotV1{Coordinator: store.CommittedSlot(self.Identity()), Supervisor: store.CommittedSlot(rs), Runsc: store.CommittedSlot(run), ContainerId: &ctr}})
		}
		for _, st := range steps {
			if err := e.st.Update(func(tx *store.Tx) error {
				return tx.PutParticipant(1, participant.Sandbox, st.phase, &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Sandbox{Sandbox: st.snap}})
			}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := st.Update(func(tx *store.Tx) error { return tx.PutParticipant(1, participant.Sandbox, participant.Intent, nil) }); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *roleEnv) phase(t *testing.T) (participant.Phase, *store.Participant) {
	t.Helper()
	var p *store.Participant
	err := e.st.View(func(tx *store.Tx) error {
		var err error
		p, err = tx.Participant(1, participant.Publication)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return p.Phase, p
}

type doc struct {
	Key string `json:"key"`
}

func TestBeginPublishesThenListens(t *testing.T) {
	e := newRole(t)
	// A stale socket of a dead generation is replaced.
	if err := os.WriteFile(e.cfg.Socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Begin(doc{Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{e.cfg.File, e.cfg.Socket} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %o, want 0600", f, fi.Mode().Perm())
		}
	}
	var got doc
	b, _ := os.ReadFile(e.cfg.File)
	if err := json.Unmarshal(b, &got); err != nil || got.Key != "k1" {
		t.Fatalf("publication file %q: %v", b, err)
	}
	if _, err := os.Stat(e.cfg.File + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary publication file left: %v", err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := e.s.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("unix", e.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	// Nothing is durable before Commit.
	if ph, _ := e.phase(t); ph != "" {
		t.Fatalf("publication recorded by Begin: %s", ph)
	}
}

func TestCommitNeedsCommittedSandbox(t *testing.T) {
	e := newRole(t)
	if err := e.s.Begin(doc{}); err != nil {
		t.Fatal(err)
	}
	if err := e.sandbox(participant.Intent); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err == nil {
		t.Fatal("publication committed while the sandbox is not")
	}
	if ph, _ := e.phase(t); ph == participant.Committed {
		t.Fatal("a refused Commit left the publication Committed")
	}
}

func TestCommitWithdrawRelease(t *testing.T) {
	e := newRole(t)
	if err := e.s.Begin(doc{}); err != nil {
		t.Fatal(err)
	}
	if err := e.sandbox(participant.Committed); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err != nil {
		t.Fatal(err)
	}
	ph, p := e.phase(t)
	if ph != participant.Committed {
		t.Fatalf("publication %s after Commit", ph)
	}
	pub := p.Snapshot.GetPublication()
	var st unix.Stat_t
	if err := unix.Stat(e.cfg.Socket, &st); err != nil {
		t.Fatal(err)
	}
	if pub.GetControlSocket().GetIno() != st.Ino || pub.GetControlSocket().GetDev() != uint64(st.Dev) || string(pub.GetConfigurationFingerprint()) != "cfg" ||
		pub.GetPublishedUnixNano() != time.Unix(1_800_000_000, 0).UnixNano() {
		t.Fatalf("publication snapshot %v does not name the socket (%d:%d), fingerprint and time", pub, st.Dev, st.Ino)
	}
	e.s.Withdraw()
	for _, f := range []string{e.cfg.File, e.cfg.Socket} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("%s after Withdraw: %v", f, err)
		}
	}
	if _, err := e.s.Accept(); err == nil {
		t.Fatal("Accept after Withdraw")
	}
	e.s.Withdraw() // twice is nothing
	if err := e.s.Release("teardown: publication file removed, listener closed"); err != nil {
		t.Fatal(err)
	}
	if ph, _ := e.phase(t); ph != participant.Clean {
		t.Fatalf("publication %s after Release", ph)
	}
	if err := e.s.Release("again"); err != nil {
		t.Fatalf("Release of a Clean publication: %v", err)
	}
}

// A dead generation's Committed publication is recovered by Clean; so is
// one that crashed at its bare Intent, and a generation that never
// published needs nothing.
func TestRecovery(t *testing.T) {
	e := newRole(t)
	if err := Clean(e.st, 1, "bootstrap recovery"); err != nil {
		t.Fatalf("Clean of a never-published generation: %v", err)
	}
	if ph, _ := e.phase(t); ph != "" {
		t.Fatalf("Clean recorded a publication that never was: %s", ph)
	}
	if err := e.st.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(1, participant.Publication, participant.Intent, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := Clean(e.st, 1, "bootstrap recovery"); err != nil {
		t.Fatal(err)
	}
	if ph, _ := e.phase(t); ph != participant.Clean {
		t.Fatalf("bare Intent publication %s after Clean", ph)
	}

	e = newRole(t)
	if err := e.s.Begin(doc{}); err != nil {
		t.Fatal(err)
	}
	if err := e.sandbox(participant.Committed); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err != nil {
		t.Fatal(err)
	}
	// The coordinator died: a new one (its own Service never began) cleans.
	if err := Clean(e.st, 1, "bootstrap recovery: the dead generation's coordinator and socket are gone"); err != nil {
		t.Fatal(err)
	}
	if ph, _ := e.phase(t); ph != participant.Clean {
		t.Fatalf("publication %s after recovery", ph)
	}
}
