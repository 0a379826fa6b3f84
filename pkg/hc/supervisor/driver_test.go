package supervisor

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/trust"
)

// fixture is one Driver over the real broker launching the fake RS.
type fixture struct {
	t      *testing.T
	d      *Driver
	anchor *trust.Anchor
	domain string

	mu      sync.Mutex
	inputs  int
	staged  []pidfs.Identity
	failed  bool
	watched *proc.Child
}

const testGeneration = 7

// launch spawns the fake RS in mode; edit adjusts the Config first.
func launch(t *testing.T, mode string, edit func(*Config)) *fixture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), exe)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.Create(filepath.Join(t.TempDir(), "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	dom := string(domain.DeriveID("default", "/p"))
	coord, _ := trust.NewID(nil)
	sandboxID, _ := trust.NewID(nil)
	anchor, err := trust.NewAnchor(trust.GenerationIdentity{DomainID: dom, Generation: testGeneration, CoordinatorID: coord,
		Profile: "default", ConfigFingerprint: "sha256:" + strings.Repeat("0", 64)}, sandboxID, trust.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, anchor: anchor, domain: dom}
	cfg := Config{
		Broker: broker, Path: exe, LogLevel: "debug", Lock: lock,
		Env:    []string{"PATH=/usr/bin:/bin", fakeEnv + "=" + mode},
		MapIDs: mapOwnID,
		Inputs: func() (Inputs, error) {
			f.mu.Lock()
			f.inputs++
			f.mu.Unlock()
			return Inputs{Policy: []byte("policy-bytes"), Anchor: anchor, DomainID: dom, Generation: testGeneration, ImageRef: "busybox"}, nil
		},
		Staged: func(id pidfs.Identity) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.staged = append(f.staged, id)
			return nil
		},
		Failed: func() { f.mu.Lock(); f.failed = true; f.mu.Unlock() },
		Watch:  func(c *proc.Child) { f.mu.Lock(); f.watched = c; f.mu.Unlock() },
	}
	if edit != nil {
		edit(&cfg)
	}
	f.d = Spawn(cfg)
	t.Cleanup(func() {
		if c := f.d.Child(); c != nil {
			c.Signal(unix.SIGKILL)
			<-c.Done()
		}
	})
	return f
}

// mapOwnID maps root in RS's user namespace to the test's own ids (what
// an unprivileged user may write without newuidmap).
func mapOwnID(_ context.Context, pid int) error {
	for _, w := range []struct{ file, data string }{
		{"setgroups", "deny"},
		{"uid_map", fmt.Sprintf("0 %d 1", os.Getuid())},
		{"gid_map", fmt.Sprintf("0 %d 1", os.Getgid())},
	} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, w.file), []byte(w.data), 0); err != nil {
			return err
		}
	}
	return nil
}

func (f *fixture) recv() *lv1.SupervisorMessage {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var m lv1.SupervisorMessage
	if err := f.d.Recv(ctx, &m); err != nil {
		f.t.Fatalf("recv: %v", err)
	}
	return &m
}

func wait(t *testing.T, c *proc.Child) pidfs.ExitStatus {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("RS did not exit")
	}
	st, _ := c.Status()
	return st
}

// TestHeldUntilReleased: RS is staged (inputs written, ownership recorded)
// only once the stage is released, runs with its sealed inputs as root of
// its own user namespace, and stops on StopSandbox.
func TestHeldUntilReleased(t *testing.T) {
	f := launch(t, fakeObey, nil)
	time.Sleep(300 * time.Millisecond) // the clone and id maps are done by now
	f.mu.Lock()
	inputs, staged := f.inputs, len(f.staged)
	f.mu.Unlock()
	if inputs != 0 || staged != 0 || f.d.Child() != nil {
		t.Fatalf("before release: inputs %d, staged %d, child %v", inputs, staged, f.d.Child())
	}
	if err := f.d.Send(context.Background(), &lv1.CoordinatorMessage{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("send before Finish: %v, want ErrUnavailable", err)
	}
	if err := f.d.Finish(); err != nil {
		t.Fatal(err)
	}
	rs := f.d.Child()
	f.mu.Lock()
	if len(f.staged) != 1 || f.staged[0] != rs.Identity() || f.watched != rs {
		t.Errorf("staged %v, watched %v; RS is %v", f.staged, f.watched, rs.Identity())
	}
	f.mu.Unlock()
	if f.d.Identity() != rs.Identity() {
		t.Errorf("Identity %v, want %v", f.d.Identity(), rs.Identity())
	}
	want := fmt.Sprintf("uid=0 policy=policy-bytes domain=%s generation=%d image=busybox", f.domain, testGeneration)
	if got := f.recv().GetProgress().GetMessage(); got != want {
		t.Errorf("RS reported %q, want %q", got, want)
	}
	if err := f.d.VerifyStaged(f.recv().GetStaged()); err != nil {
		t.Errorf("ownership signed with RS's credential refused: %v", err)
	}
	if got := f.d.Stop(context.Background()); got != rs {
		t.Fatalf("Stop returned %v", got)
	}
	if m := f.recv(); m.GetStopped() == nil {
		t.Errorf("RS sent %v, want SupervisorStopped", m)
	}
	if st, _ := rs.Status(); !st.Exited || st.Code != 0 || f.d.Killed() {
		t.Errorf("RS ended %v (killed %v), want exit 0", st, f.d.Killed())
	}
}

// TestStagedOwnershipMustBeSigned: a StagedProcessOwnership that is
// unsigned, signed by another key, or altered after signing is refused;
// the one RS signed with its credential's key passes.
func TestStagedOwnershipMustBeSigned(t *testing.T) {
	f := launch(t, fakeObey, nil)
	if err := f.d.Finish(); err != nil {
		t.Fatal(err)
	}
	f.recv()
	good := f.recv().GetStaged()
	if err := f.d.VerifyStaged(good); err != nil {
		t.Fatalf("RS's own message: %v", err)
	}
	unsigned := cloneStaged(good)
	unsigned.Signature = nil
	_, otherKey, _ := ed25519.GenerateKey(nil)
	foreign, err := supervisortest.Sign(otherKey, cloneStaged(good))
	if err != nil {
		t.Fatal(err)
	}
	altered := cloneStaged(good)
	altered.Identity.PidfsStIno++
	for name, m := range map[string]*lv1.StagedProcessOwnership{"unsigned": unsigned, "foreign key": foreign, "altered": altered} {
		if err := f.d.VerifyStaged(m); err == nil || !strings.Contains(err.Error(), "not signed") || !errors.Is(err, errdefs.ErrRefused) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A driver with no credential (its RS never staged) refuses all.
	if err := OverChannel(nil).VerifyStaged(good); err == nil {
		t.Error("a driver without RS's credential accepted a message")
	}
}

func cloneStaged(s *lv1.StagedProcessOwnership) *lv1.StagedProcessOwnership {
	return &lv1.StagedProcessOwnership{DomainId: s.DomainId, Generation: s.Generation, CoordinatorId: s.CoordinatorId, Slot: s.Slot,
		Identity:  &lv1.PidfsProcessIdentityV1{BootId: s.Identity.BootId, PidfsStDev: s.Identity.PidfsStDev, PidfsStIno: s.Identity.PidfsStIno, HostPid: s.Identity.HostPid},
		Signature: s.Signature}
}

// TestStopKillsUnresponsiveSupervisor: RS that ignores StopSandbox is
// killed through its pidfd once the bound passes.
func TestStopKillsUnresponsiveSupervisor(t *testing.T) {
	f := launch(t, fakeIgnore, func(c *Config) { c.StopWait = 300 * time.Millisecond })
	if err := f.d.Finish(); err != nil {
		t.Fatal(err)
	}
	f.recv()
	start := time.Now()
	rs := f.d.Stop(context.Background())
	st, _ := rs.Status()
	if st.Exited || st.Signal != unix.SIGKILL || !f.d.Killed() {
		t.Errorf("RS ended %v (killed %v), want SIGKILL by the driver", st, f.d.Killed())
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("killed after %v, before the bound", d)
	}
	if f.d.AwaitStopped(10 * time.Millisecond) {
		t.Error("SupervisorStopped reported without ReportStopped")
	}
	f.d.ReportStopped()
	f.d.ReportStopped()
	if !f.d.AwaitStopped(0) {
		t.Error("ReportStopped not seen")
	}
}

// TestLifetimePipe: RS ends when the coordinator closes its lifetime pipe
// (as when the coordinator dies).
func TestLifetimePipe(t *testing.T) {
	f := launch(t, fakeIgnore, nil)
	if err := f.d.Finish(); err != nil {
		t.Fatal(err)
	}
	f.recv()
	f.d.Close()
	if st := wait(t, f.d.Child()); !st.Exited || st.Code != exitLifetime {
		t.Errorf("RS ended %v, want exit %d (lifetime EOF)", st, exitLifetime)
	}
}

// TestAbortBeforeRelease: a coordinator that did not start aborts RS held
// at its barrier: nothing is written or recorded and RS never ran.
func TestAbortBeforeRelease(t *testing.T) {
	f := launch(t, fakeObey, nil)
	done := make(chan struct{})
	go func() { defer close(done); f.d.Abort() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Abort did not return")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inputs != 0 || len(f.staged) != 0 || f.watched != nil || f.failed || f.d.Child() != nil {
		t.Errorf("after abort: inputs %d, staged %v, watched %v, stage failed %v", f.inputs, f.staged, f.watched, f.failed)
	}
	if f.d.Stop(context.Background()) != nil {
		t.Error("Stop found an RS to stop")
	}
}

// TestAbortAfterRelease: an RS already running loses its channel and
// lifetime pipe and ends; Abort waits for it.
func TestAbortAfterRelease(t *testing.T) {
	f := launch(t, fakeIgnore, nil)
	if err := f.d.Finish(); err != nil {
		t.Fatal(err)
	}
	rs := f.d.Child()
	f.d.Abort()
	select {
	case <-rs.Done():
	default:
		t.Fatal("Abort returned with RS running")
	}
	if st, _ := rs.Status(); !st.Exited || st.Code != exitLifetime {
		t.Errorf("RS ended %v, want exit %d (lifetime EOF)", st, exitLifetime)
	}
}

// TestStageFailure: when recording RS's staged ownership fails, the broker
// kills the held RS; the driver reports it killed and holds no RS.
func TestStageFailure(t *testing.T) {
	f := launch(t, fakeObey, func(c *Config) {
		c.Staged = func(pidfs.Identity) error { return errdefs.New(errdefs.ErrCorrupt, "store refused") }
	})
	err := f.d.Finish()
	if !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "start runtime supervisor") {
		t.Fatalf("Finish: %v", err)
	}
	f.mu.Lock()
	failed := f.failed
	f.mu.Unlock()
	if !failed || !f.d.Killed() || f.d.Child() != nil {
		t.Errorf("stage failed %v, killed %v, child %v", failed, f.d.Killed(), f.d.Child())
	}
}

// TestSetupFailureBeforeRelease: an id-map failure is reported by Finish
// (after release, as a failed acquisition), and nothing of RS was staged.
func TestSetupFailureBeforeRelease(t *testing.T) {
	f := launch(t, fakeObey, func(c *Config) {
		c.MapIDs = func(context.Context, int) error { return errdefs.New(errdefs.ErrUnsupportedHost, "no subordinate ids") }
	})
	if err := f.d.Finish(); !errors.Is(err, errdefs.ErrUnsupportedHost) {
		t.Fatalf("Finish: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inputs != 0 || len(f.staged) != 0 || !f.failed || f.d.Child() != nil {
		t.Errorf("inputs %d, staged %v, failed %v, child %v", f.inputs, f.staged, f.failed, f.d.Child())
	}
}

// TestOverChannel: the exchange over a supervisor the coordinator did not
// launch (supervisortest) sends and receives through the held channel.
func TestOverChannel(t *testing.T) {
	rs := supervisortest.New(t)
	d := OverChannel(rs.HC)
	rs.Progress("hi")
	var m lv1.SupervisorMessage
	if err := d.Recv(context.Background(), &m); err != nil || m.GetProgress().GetMessage() != "hi" {
		t.Fatalf("recv %v, %v", &m, err)
	}
	if err := d.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Stop{Stop: &lv1.StopSandbox{}}}); err != nil {
		t.Fatal(err)
	}
	if rs.Expect().GetStop() == nil {
		t.Error("StopSandbox not received")
	}
	if d.Child() != nil || d.Stop(context.Background()) != nil {
		t.Error("a driver over a channel holds a process")
	}
}
