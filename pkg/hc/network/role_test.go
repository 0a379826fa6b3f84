package network

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
	"github.com/lazaret/lazaret/pkg/slirp"
	"github.com/lazaret/lazaret/pkg/store"
)

func TestMain(m *testing.M) {
	proc.MaybeRunWrapper() // the broker's fallback barrier re-executes the test binary
	os.Exit(m.Run())
}

// fakeHelper launches a stand-in for slirp4netns through the real broker:
// the same descriptors and staging, and the helper's protocol (it writes
// the ready byte on fd 4 and exits when fd 3's peer closes); it joins no
// namespace and configures no tap (the integration scenarios do).
type fakeHelper struct {
	b      *proc.Broker
	script string
	mu     sync.Mutex
	argv   []string
}

func (f *fakeHelper) Acquire(ctx context.Context, spec proc.AcquireSpec) (*proc.Child, error) {
	f.mu.Lock()
	f.argv = spec.Target.Args
	f.mu.Unlock()
	spec.Target.Path, spec.Target.Args = "/bin/sh", []string{"sh", "-c", f.script}
	return f.b.Acquire(ctx, spec)
}

const helperProtocol = `printf 1 >&4; exec 4>&-; exec cat <&3 >/dev/null`

type roleEnv struct {
	*testDomain
	broker *proc.Broker
	rs     *proc.Child
	helper *fakeHelper
	s      *Service
}

func newRole(t *testing.T, script string, profile ...func(*config.Profile)) *roleEnv {
	t.Helper()
	d := openDomain(t)
	b := proctest.SelfBroker(t)
	// A stand-in Runtime Supervisor: a real child whose pid the helper's
	// chain names and whose identity the records commit.
	rs, err := b.Acquire(context.Background(), proc.AcquireSpec{Slot: "supervisor",
		Target: proc.Command{Path: "/bin/sleep", Args: []string{"sleep", "60"}, Dir: "/"},
		Stage:  func(context.Context, pidfs.Identity) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Signal(unix.SIGKILL); <-rs.Done() })
	d.commitSupervisor(t, rs.Identity())
	cfgs, err := config.Parse("", nil, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := cfgs.Profile("default")
	prof := *def
	for _, f := range profile {
		f(&prof)
	}
	e := &roleEnv{testDomain: d, broker: b, rs: rs, helper: &fakeHelper{b: b, script: script}}
	e.s = New(Config{Store: d.st, DomainID: d.id, Generation: 1, Profile: &prof, SidecarID: "sc-1", Hostname: "ws",
		RuntimeDir: t.TempDir(), LogPath: "the Domain log", Launcher: e.helper, LinkExe: testLinkExe})
	if _, err := e.s.DerivePolicy(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.s.Stop)
	return e
}

func (e *roleEnv) phases(t *testing.T) (helper, network participant.Phase) {
	t.Helper()
	return e.participant(t, participant.Helper).Phase, e.participant(t, participant.Network).Phase
}

// commit judges r and runs the role's Commit of it in a transaction of
// its own, with RS as the committed supervisor, as the coordinator does.
func (e *roleEnv) commit(r *lv1.SandboxReady) error {
	if err := e.s.Judge(r); err != nil {
		return err
	}
	return e.st.Update(func(tx *store.Tx) error { return e.s.Commit(tx, r, e.rs.Identity()) })
}

// readyReport is the probe report a sandbox whose network enforces spec
// prints.
func readyReport(spec netprobe.Spec) string {
	r := netprobe.Report{Version: netprobe.Version, Fingerprint: spec.Fingerprint, GatewaySource: spec.Guest, Gateway: "refused", DNSAnswered: true}
	for _, p := range spec.Deny {
		r.Deny = append(r.Deny, netprobe.Route{Prefix: p, Probe: p.Addr(), Source: netprobe.LoopbackSource})
	}
	for _, p := range spec.Allow {
		r.Allow = append(r.Allow, netprobe.Route{Prefix: p, Probe: p.Addr(), Source: spec.Guest})
	}
	return r.Line()
}

// testLinkExe is the executable the role names as the helper chain's
// mount-namespace link (lazaret-gitroute's path in a coordinator).
const testLinkExe = "/opt/lazaret/libexec/lazaret/lazaret-gitroute"

// TestHelperNeedsLinkExecutable: without the executable of the chain's
// mount-namespace link the helper is not started (the coordinator's own
// binary does not host that role).
func TestHelperNeedsLinkExecutable(t *testing.T) {
	e := newRole(t, helperProtocol)
	e.s.cfg.LinkExe = ""
	if err := <-e.s.Launch(e.rs); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := e.s.HelperReady(); err == nil || !strings.Contains(err.Error(), slirp.RoleArg) {
		t.Fatalf("helper start without a link executable: %v, want a refusal naming %s", err, slirp.RoleArg)
	}
	if e.helper.argv != nil {
		t.Fatalf("the helper chain was acquired: %v", e.helper.argv)
	}
}

// TestLifecycleRecordsEachStep drives the role through its interface —
// Launch, Commit, Release, Stop, Finish — against a real store and checks
// the records each step leaves, ending Clean with the exact absence proof.
func TestLifecycleRecordsEachStep(t *testing.T) {
	e := newRole(t, helperProtocol)
	if err := <-e.s.Launch(e.rs); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := e.s.HelperReady(); err != nil {
		t.Fatalf("helper start: %v", err)
	}
	if h, n := e.phases(t); h != participant.Intent || n != participant.Intent {
		t.Fatalf("after start: helper %s, network %s", h, n)
	}
	helperSlot := e.participant(t, participant.Helper).View.Slots["helper"]
	if helperSlot.State != participant.Staged {
		t.Fatalf("helper slot after start: %s", helperSlot)
	}
	if argv := strings.Join(e.helper.argv, " "); !strings.Contains(argv, "slirp4netns") || !strings.Contains(argv, testLinkExe+" "+slirp.RoleArg+" ") {
		t.Fatalf("the helper chain does not run slirp4netns through %s's link: %s", testLinkExe, argv)
	}
	st := e.s.Status()
	if st.GetConnectivityHelper() != helperSlot.Identity.String() || st.GetReadinessFingerprint() == "" {
		t.Fatalf("status %v", st)
	}
	spec := e.s.Probe()
	tap := netip.PrefixFrom(e.s.Addr().Guest, 24).String()
	// Evidence that does not prove the policy is refused: nothing is
	// published or committed, the helper and the network stay in Intent.
	bad := &lv1.SandboxReady{ObservedTapAddress: tap, NetworkProbeReport: readyReport(netprobe.Spec{Fingerprint: "other"})}
	if err := e.commit(bad); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("commit with another generation's probe: %v", err)
	}
	if h, n := e.phases(t); h != participant.Intent || n != participant.Intent {
		t.Fatalf("after refused commit: helper %s, network %s", h, n)
	}
	// Nor does a Commit whose probe no Judge proved record anything.
	if err := e.st.Update(func(tx *store.Tx) error { return e.s.Commit(tx, bad, e.rs.Identity()) }); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("commit of an unproven probe: %v", err)
	}
	if h, n := e.phases(t); h != participant.Intent || n != participant.Intent {
		t.Fatalf("after refused unjudged commit: helper %s, network %s", h, n)
	}
	good := &lv1.SandboxReady{ObservedTapAddress: tap, NetworkProbeReport: readyReport(spec)}
	if err := e.commit(good); err != nil {
		t.Fatalf("commit: %v", err)
	}
	net := e.participant(t, participant.Network)
	if net.Phase != participant.Committed || net.View.Slots["supervisor"].Identity != e.rs.Identity() {
		t.Fatalf("network after commit: %s %v", net.Phase, net.View.Slots)
	}
	if st := e.s.Status(); !st.GetDenyObserved() || !st.GetPermitObserved() || !st.GetDnsObserved() {
		t.Fatalf("status verdict %v", st)
	}
	e.s.Release()
	if h, n := e.phases(t); h != participant.ReleaseIntent || n != participant.ReleaseIntent {
		t.Fatalf("after release: helper %s, network %s", h, n)
	}
	// Once released the helper may begin to stop: BeginStop closes its
	// exit fd without waiting, and the helper exits on it (twice is
	// harmless); Stop then only waits.
	e.s.BeginStop()
	e.s.BeginStop()
	select {
	case <-e.s.helper.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the helper did not exit once BeginStop closed its exit fd")
	}
	// RS still runs: nothing is recorded Clean.
	e.s.Stop()
	e.s.Finish(e.rs)
	if h, n := e.phases(t); h != participant.ReleaseIntent || n != participant.ReleaseIntent {
		t.Fatalf("finish with RS running: helper %s, network %s", h, n)
	}
	e.rs.Signal(unix.SIGKILL)
	<-e.rs.Done()
	e.s.Finish(e.rs)
	if h, n := e.phases(t); h != participant.Clean || n != participant.Clean {
		t.Fatalf("after finish: helper %s, network %s", h, n)
	}
}

// TestRecoverCrashWithHelperRunning: a coordinator that died after the
// helper was staged leaves both participants in Intent; recovery refuses
// while the recorded helper runs and records both Clean once it is gone.
func TestRecoverCrashWithHelperRunning(t *testing.T) {
	e := newRole(t, helperProtocol)
	if err := <-e.s.Launch(e.rs); err != nil {
		t.Fatal(err)
	}
	if err := e.s.HelperReady(); err != nil {
		t.Fatal(err)
	}
	refusals := Recover(e.st, 1, absence)
	if len(refusals) == 0 || !strings.Contains(refusals[0], "helper helper") {
		t.Fatalf("recovery with the helper running: %v", refusals)
	}
	if h, n := e.phases(t); h != participant.Intent || n != participant.Intent {
		t.Fatalf("refused recovery changed records: helper %s, network %s", h, n)
	}
	e.s.Stop() // the helper exits on its exit fd
	if refusals := Recover(e.st, 1, absence); len(refusals) != 0 {
		t.Fatalf("recovery: %v", refusals)
	}
	h := e.participant(t, participant.Helper)
	if h.Phase != participant.Clean || e.participant(t, participant.Network).Phase != participant.Clean {
		t.Fatalf("after recovery: helper %s", h.Phase)
	}
	if refusals := Recover(e.st, 1, absence); len(refusals) != 0 {
		t.Fatalf("recovery is not idempotent: %v", refusals)
	}
}

// TestRecoverCrashAfterCommit: after the helper is committed with RS as
// its supervisor, recovery needs both RS and the helper proven absent.
func TestRecoverCrashAfterCommit(t *testing.T) {
	e := newRole(t, helperProtocol)
	if err := <-e.s.Launch(e.rs); err != nil {
		t.Fatal(err)
	}
	if err := e.s.HelperReady(); err != nil {
		t.Fatal(err)
	}
	good := &lv1.SandboxReady{ObservedTapAddress: netip.PrefixFrom(e.s.Addr().Guest, 24).String(), NetworkProbeReport: readyReport(e.s.Probe())}
	if err := e.commit(good); err != nil {
		t.Fatal(err)
	}
	e.s.Stop()
	if refusals := Recover(e.st, 1, absence); len(refusals) == 0 || !strings.Contains(refusals[0], "supervisor") {
		t.Fatalf("recovery with RS running: %v", refusals)
	}
	e.rs.Signal(unix.SIGKILL)
	<-e.rs.Done()
	if refusals := Recover(e.st, 1, absence); len(refusals) != 0 {
		t.Fatalf("recovery: %v", refusals)
	}
	if h, n := e.phases(t); h != participant.Clean || n != participant.Clean {
		t.Fatalf("after recovery: helper %s, network %s", h, n)
	}
}

// TestHelperStartFailures: a helper that exits before its ready signal
// fails the start with the Domain log named, its records left for
// teardown or recovery; Stop without Launch returns at once.
func TestHelperStartFailures(t *testing.T) {
	e := newRole(t, `exit 3`)
	if err := <-e.s.Launch(e.rs); err != nil {
		t.Fatal(err)
	}
	err := e.s.HelperReady()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "the Domain log") {
		t.Fatalf("helper exit during start: %v", err)
	}
	if refusals := Recover(e.st, 1, absence); len(refusals) != 0 {
		t.Fatalf("recovery: %v", refusals)
	}
	if h, n := e.phases(t); h != participant.Clean || n != participant.Clean {
		t.Fatalf("after recovery: helper %s, network %s", h, n)
	}
	New(Config{Store: e.st}).Stop()
}

var _ = store.ErrNotFound
