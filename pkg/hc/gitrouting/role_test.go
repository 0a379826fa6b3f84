package gitrouting

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// roleEnv is the role over a real Domain Store in a temp dir with
// generation 1 recorded (this test process its coordinator), and a real
// process standing in for the Git-routing daemon RS would acquire.
type roleEnv struct {
	dir    string   // the Domain Root (the store's)
	lock   *os.File // its lifecycle lock
	st     *store.Store
	s      *Service
	daemon *exec.Cmd
	id     pidfs.Identity
	acked  []*lv1.StagedProcessOwnership
}

func newRole(t *testing.T) *roleEnv {
	t.Helper()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
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
		if err := tx.CreateGeneration(store.NewGeneration{Number: 1, ConfigurationFingerprint: []byte("cfg"), CoordinatorID: "hc-1", Coordinator: self.Identity()}); err != nil {
			return err
		}
		return tx.PutParticipant(1, participant.Sandbox, participant.Intent, nil)
	}); err != nil {
		t.Fatal(err)
	}
	e := &roleEnv{dir: dir, lock: lock, st: st, daemon: exec.Command("sleep", "60")}
	if err := e.daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stopDaemon)
	h, err := pidfs.Open(e.daemon.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	e.id = h.Identity()
	h.Close()
	ws := t.TempDir()
	paths := domain.Paths{DomainRoot: dir}
	e.s = New(Config{Store: st, Generation: 1, Profile: &config.Profile{IgnoredPathIsolation: true},
		Workspace: ws, DomainRoot: dir, StateDir: paths.IgnoredStateDir(), RoutedWorkspace: filepath.Join(dir, "routed"),
		Ack: func(s *lv1.StagedProcessOwnership) error { e.acked = append(e.acked, s); return nil }})
	e.s.StartSticky(nil)
	return e
}

func (e *roleEnv) stopDaemon() {
	if e.daemon.ProcessState == nil {
		e.daemon.Process.Kill()
		e.daemon.Wait()
	}
}

func (e *roleEnv) phase(t *testing.T) (participant.Phase, participant.Slot) {
	t.Helper()
	var p *store.Participant
	if err := e.st.View(func(tx *store.Tx) (err error) { p, err = tx.Participant(1, participant.GitRouting); return err }); err != nil {
		t.Fatal(err)
	}
	return p.Phase, p.View.Slots["daemon"]
}

func (e *roleEnv) staged() *lv1.StagedProcessOwnership {
	return &lv1.StagedProcessOwnership{Generation: 1, Slot: "git_routing", Identity: store.IdentityProto(e.id)}
}

// recordReady runs the role's Ready in a transaction of its own.
func (e *roleEnv) recordReady(r *lv1.SandboxReady) error {
	return e.st.Update(func(tx *store.Tx) error { return e.s.Ready(tx, r) })
}

func (e *roleEnv) ready() *lv1.SandboxReady {
	return &lv1.SandboxReady{GitRouting: &lv1.GitRoutingReady{Daemon: store.IdentityProto(e.id), MountId: 7, FsDev: 42, MountpointDev: 8, MountpointIno: 9, Mountpoint: "/routed"}}
}

// TestLifecycleRecordsEachStep drives the role through its interface and
// checks the git_routing records each step leaves.
func TestLifecycleRecordsEachStep(t *testing.T) {
	e := newRole(t)
	var sb ocispec.Sandbox
	start, err := e.s.Start(&sb)
	if err != nil {
		t.Fatal(err)
	}
	if !e.s.Wanted() || start.Mountpoint != sb.RouterSource || !start.IgnoredPathIsolation {
		t.Fatalf("start %v, sandbox router source %q", start, sb.RouterSource)
	}
	if ph, _ := e.phase(t); ph != participant.Intent {
		t.Fatalf("after start: %s", ph)
	}
	// SandboxReady naming a daemon that was not staged is refused.
	if err := e.recordReady(e.ready()); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("ready before staging: %v", err)
	}
	if err := e.s.CommitStaged(e.staged()); err != nil || len(e.acked) != 1 {
		t.Fatalf("commit staged: %v (%d acks)", err, len(e.acked))
	}
	if ph, sl := e.phase(t); ph != participant.Intent || sl.State != participant.Staged || sl.Identity != e.id {
		t.Fatalf("after staging: %s %s", ph, sl)
	}
	if err := e.s.CommitStaged(e.staged()); !errors.Is(err, errdefs.ErrRefused) || len(e.acked) != 1 {
		t.Fatalf("duplicate staging: %v", err)
	}
	if err := e.recordReady(e.ready()); err != nil {
		t.Fatal(err)
	}
	if ph, sl := e.phase(t); ph != participant.Prepared || sl.State != participant.CommittedSlot || sl.Identity != e.id {
		t.Fatalf("after ready: %s %s", ph, sl)
	}
	if err := e.s.Release(); err != nil {
		t.Fatal(err)
	}
	if ph, _ := e.phase(t); ph != participant.ReleaseIntent {
		t.Fatalf("after release: %s", ph)
	}
	// The daemon still runs: not Clean.
	if err := Clean(e.st, 1, "test", absence); err == nil {
		t.Fatal("clean with the daemon running succeeded")
	}
	e.stopDaemon()
	if err := Clean(e.st, 1, "test", absence); err != nil {
		t.Fatal(err)
	}
	if ph, _ := e.phase(t); ph != participant.Clean {
		t.Fatalf("after clean: %s", ph)
	}
	e.s.EndSticky()
}

// TestRecoverCrashAfterStaging: a coordinator that died with the daemon
// staged leaves Intent; recovery waits for the daemon's absence.
func TestRecoverCrashAfterStaging(t *testing.T) {
	e := newRole(t)
	var sb ocispec.Sandbox
	if _, err := e.s.Start(&sb); err != nil {
		t.Fatal(err)
	}
	if err := e.s.CommitStaged(e.staged()); err != nil {
		t.Fatal(err)
	}
	if err := Clean(e.st, 1, "bootstrap recovery", absence); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("recovery with the daemon running: %v", err)
	}
	if ph, _ := e.phase(t); ph != participant.Intent {
		t.Fatalf("refused recovery changed the record: %s", ph)
	}
	e.stopDaemon()
	if err := Clean(e.st, 1, "bootstrap recovery", absence); err != nil {
		t.Fatal(err)
	}
	if ph, _ := e.phase(t); ph != participant.Clean {
		t.Fatalf("after recovery: %s", ph)
	}
}

// TestReadyRefusesUnaskedDaemon: a generation that did not ask for the
// daemon refuses SandboxReady naming one, and accepts none.
func TestReadyRefusesUnaskedDaemon(t *testing.T) {
	e := newRole(t)
	if err := e.recordReady(&lv1.SandboxReady{}); err != nil {
		t.Fatalf("no daemon asked, none reported: %v", err)
	}
	if err := e.recordReady(e.ready()); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("unasked daemon: %v", err)
	}
}

// absence is the coordinator's recovery proof without its stop: a
// recorded process that still runs is reported, not killed.
var absence = supervisortest.Absence(100*time.Millisecond, pidfs.Identity{})

// TestStartHandsTheScansGitignoresToTheDaemon: with isolation, Start
// writes the .gitignore files the start scan read (none inside a routed
// directory) to RulesSnapshot and names it in GitRoutingStart, so that the
// daemon applies exactly those rules without a walk of its own; without
// isolation it hands none.
func TestStartHandsTheScansGitignoresToTheDaemon(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	e := newRole(t)
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, ".gitignore"), "build/\n")
	writeFile(t, filepath.Join(ws, "src", ".gitignore"), "*.o\n")
	writeFile(t, filepath.Join(ws, "build", ".gitignore"), "never read\n")
	snap := filepath.Join(e.dir, "gitignore-snapshot.json")
	for _, isolate := range []bool{true, false} {
		os.Remove(snap)
		paths := domain.Paths{DomainRoot: e.dir}
		s := New(Config{Store: e.st, Generation: 1, Profile: &config.Profile{IgnoredPathIsolation: isolate},
			Workspace: ws, DomainRoot: e.dir, StateDir: paths.IgnoredStateDir(), RoutedWorkspace: filepath.Join(e.dir, "routed"), RulesSnapshot: snap})
		s.StartSticky(nil)
		var sb ocispec.Sandbox
		start, err := s.Start(&sb)
		if err != nil {
			t.Fatal(err)
		}
		if !isolate {
			if start.RulesSnapshot != "" {
				t.Errorf("without isolation the daemon is handed %q", start.RulesSnapshot)
			}
			if _, err := os.Stat(snap); !os.IsNotExist(err) {
				t.Errorf("without isolation a snapshot was written: %v", err)
			}
			continue
		}
		if start.RulesSnapshot != snap {
			t.Fatalf("GitRoutingStart names snapshot %q, want %q", start.RulesSnapshot, snap)
		}
		got, err := ignorerules.ReadSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		want := []ignorerules.Gitignore{{Dir: "", Content: []byte("build/\n")}, {Dir: "src", Content: []byte("*.o\n")}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("snapshot %q, want %q", got, want)
		}
	}
}
