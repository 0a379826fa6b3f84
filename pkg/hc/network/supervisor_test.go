package network

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/netsetup"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/slirp"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/store/storetest"
)

// supervised is a roleEnv on the real HC↔RS channel: a fake Runtime
// Supervisor sends the hello, the egress proxy's signed staged ownership
// and SandboxReady; the role's acknowledgement reaches it as the
// coordinator's ackStaged sends it (the exact echo, signed with the
// coordinator's key).
type supervised struct {
	*roleEnv
	sup   *supervisortest.Supervisor
	coord ed25519.PublicKey
	rsKey ed25519.PrivateKey
}

func newSupervised(t *testing.T, profile ...func(*config.Profile)) *supervised {
	t.Helper()
	g := &supervised{roleEnv: newRole(t, helperProtocol, profile...), sup: supervisortest.New(t)}
	pub, key, _ := ed25519.GenerateKey(nil)
	_, g.rsKey, _ = ed25519.GenerateKey(nil)
	g.coord = pub
	g.s.cfg.Ack = g.sup.Acker(key)
	return g
}

func allowlist(p *config.Profile) {
	p.Network.Mode, p.Network.AllowHosts = config.ModeAllowlist, []string{"example.com"}
}

// launch starts the role as the coordinator does once RS exists: the
// network is prepared from RS's netns and the helper is ready.
func (g *supervised) launch(t *testing.T) {
	t.Helper()
	if err := <-g.s.Launch(g.rs); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := g.s.HelperReady(); err != nil {
		t.Fatalf("helper start: %v", err)
	}
}

// deliver reads RS's next message on the coordinator's end and hands it
// to the role as the coordinator's exchange does (pkg/hc supervisor.go,
// rsstart.go): the hello's sandbox network namespace to SandboxNetNS, an
// egress_proxy Staged report to CommitStagedEgress, SandboxReady to
// VerifyReady, ReadyEgress and Commit. The hello's path is returned.
func (g *supervised) deliver(t *testing.T) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), supervisortest.DefaultWait)
	defer cancel()
	var m lv1.SupervisorMessage
	if err := g.sup.HC.Recv(ctx, &m); err != nil {
		t.Fatalf("coordinator end: %v", err)
	}
	switch m.GetMsg().(type) {
	case *lv1.SupervisorMessage_Hello:
		pid := g.rs.Handle().PID()
		return g.s.SandboxNetNS(m.GetHello(), pid, fmt.Sprintf("/proc/%d/ns/net", pid), g.s.NetNS())
	case *lv1.SupervisorMessage_Staged:
		return "", g.s.CommitStagedEgress(m.GetStaged())
	case *lv1.SupervisorMessage_Ready:
		r := m.GetReady()
		if err := g.s.VerifyReady(r); err != nil {
			return "", err
		}
		if err := g.s.ReadyEgress(r); err != nil {
			return "", err
		}
		return "", g.commit(r)
	}
	return "", fmt.Errorf("the network role does not take %T", m.GetMsg())
}

// routes are the routes RS observes in a namespace that enforces the
// derived policy: each deny via lo, each allow and the default via the
// helper's gateway on the tap.
func (g *supervised) routes() []string {
	pol, gw := g.s.Policy(), g.s.Gateway()
	var out []string
	for _, d := range pol.Deny {
		out = append(out, fmt.Sprintf("%s via %s dev lo", d, netpolicy.LoopbackGateway))
	}
	for _, a := range pol.Allow {
		out = append(out, fmt.Sprintf("%s via %s dev %s", a, gw, slirp.Tap))
	}
	return append(out, fmt.Sprintf("0.0.0.0/0 via %s dev %s", gw, slirp.Tap))
}

// ready is the SandboxReady of a sandbox whose network enforces the
// derived policy (deny mode).
func (g *supervised) ready() *lv1.SandboxReady {
	d := g.s.Policy().Digest()
	return &lv1.SandboxReady{ObservedTapAddress: netip.PrefixFrom(g.s.Addr().Guest, 24).String(), NetworkProbeReport: readyReport(g.s.Probe()),
		PolicyDigest: d[:], ObservedRoutes: g.routes()}
}

// allowlistReady is the allowlist mode's SandboxReady naming proxy: the
// sandbox namespace routes only to the proxy, the probe finds every
// prefix unreachable and the proxy connected.
func (g *supervised) allowlistReady(proxy *lv1.PidfsProcessIdentityV1) *lv1.SandboxReady {
	r := g.ready()
	spec := g.s.Probe()
	rep := netprobe.Report{Version: netprobe.Version, Fingerprint: spec.Fingerprint, Proxy: "connected"}
	for _, p := range spec.Deny {
		rep.Deny = append(rep.Deny, netprobe.Route{Prefix: p, Probe: p.Addr(), Error: "connect: network is unreachable"})
	}
	r.NetworkProbeReport = rep.Line()
	r.ObservedRoutes = append(r.ObservedRoutes, fmt.Sprintf("%s via invalid IP dev %s", netpolicy.ProxyPrefix, netsetup.ProxyLink))
	r.EgressProxy = proxy
	r.ObservedSandboxRoutes = []string{fmt.Sprintf("%s via invalid IP dev %s", netpolicy.ProxyPrefix, netsetup.SandboxLink)}
	return r
}

// stagedProxy is RS's signed staged ownership of the egress proxy (id).
func (g *supervised) stagedProxy(t *testing.T, id pidfs.Identity) *lv1.StagedProcessOwnership {
	t.Helper()
	o, err := supervisortest.Sign(g.rsKey, &lv1.StagedProcessOwnership{DomainId: string(g.id), Generation: 1, CoordinatorId: "hc-1", Slot: "egress_proxy", Identity: store.IdentityProto(id)})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestSupervisorDrivenLifecycle (deny mode): RS's hello reporting no
// sandbox namespace gets RS's own; SandboxReady whose routes and probe
// enforce the derived policy commits helper and network with RS as their
// supervisor and the readiness evidence, with nothing sent back. Release
// keeps the identities; Finish records Clean only once RS is reaped.
func TestSupervisorDrivenLifecycle(t *testing.T) {
	g := newSupervised(t)
	g.launch(t)
	g.sup.Hello(&lv1.SupervisorHello{})
	path, err := g.deliver(t)
	if err != nil || path != fmt.Sprintf("/proc/%d/ns/net", g.rs.Handle().PID()) {
		t.Fatalf("hello: %q %v", path, err)
	}
	if g.s.EgressSpec() != nil {
		t.Fatal("deny mode asks RS for an egress proxy")
	}
	g.sup.Ready(g.ready())
	if _, err := g.deliver(t); err != nil {
		t.Fatalf("SandboxReady: %v", err)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	helper, net := g.participant(t, participant.Helper), g.participant(t, participant.Network)
	if helper.Phase != participant.Committed || helper.View.Slots["supervisor"].Identity != g.rs.Identity() || helper.View.Slots["helper"].State != participant.CommittedSlot {
		t.Fatalf("helper after SandboxReady: %s %v", helper.Phase, helper.View.Slots)
	}
	ev := net.Snapshot.GetNetwork().GetReadiness()
	if net.Phase != participant.Committed || !ev.GetDenyObserved() || !ev.GetPermitObserved() || len(ev.GetObservedRoutes()) != len(g.routes()) {
		t.Fatalf("network after SandboxReady: %s %v", net.Phase, ev)
	}
	g.s.Release()
	if h, n := g.phases(t); h != participant.ReleaseIntent || n != participant.ReleaseIntent {
		t.Fatalf("after Release: helper %s, network %s", h, n)
	}
	if g.participant(t, participant.Helper).View.Slots["helper"].Identity != helper.View.Slots["helper"].Identity {
		t.Fatal("Release dropped the helper's identity")
	}
	g.s.Stop()
	g.s.Finish(g.rs)
	if h, n := g.phases(t); h != participant.ReleaseIntent || n != participant.ReleaseIntent {
		t.Fatalf("Finish with RS running: helper %s, network %s", h, n)
	}
	g.rs.Signal(unix.SIGKILL)
	<-g.rs.Done()
	g.s.Finish(g.rs)
	if h, n := g.phases(t); h != participant.Clean || n != participant.Clean {
		t.Fatalf("after Finish: helper %s, network %s", h, n)
	}
}

// TestSupervisorMessagesOutOfState (deny mode): SandboxReady before the
// helper started, a hello reporting a sandbox namespace, a staged egress
// proxy, SandboxReady attesting another policy, routes missing a deny, or
// naming an egress proxy, and SandboxReady after Release are refused with
// an error that says why; none is acknowledged or commits the network.
func TestSupervisorMessagesOutOfState(t *testing.T) {
	g := newSupervised(t)
	g.sup.Ready(&lv1.SandboxReady{})
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("SandboxReady before Launch: %v", err)
	}
	if err := g.commit(&lv1.SandboxReady{}); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "no connectivity helper") {
		t.Fatalf("Commit before the helper started: %v", err)
	}
	g.launch(t)
	g.sup.Hello(&lv1.SupervisorHello{SandboxNetNamespace: &lv1.NamespaceIdentity{Dev: 1, Ino: 2}, SandboxNetnsTid: 7})
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "not in the allowlist mode") {
		t.Fatalf("hello with a sandbox namespace in the deny mode: %v", err)
	}
	g.sup.Staged(g.stagedProxy(t, g.rs.Identity()))
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "allowlist") {
		t.Fatalf("staged egress proxy in the deny mode: %v", err)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	for name, mut := range map[string]func(*lv1.SandboxReady){
		"another policy":  func(r *lv1.SandboxReady) { r.PolicyDigest = make([]byte, 32) },
		"a missing deny":  func(r *lv1.SandboxReady) { r.ObservedRoutes = r.ObservedRoutes[1:] },
		"an egress proxy": func(r *lv1.SandboxReady) { r.EgressProxy = store.IdentityProto(g.rs.Identity()) },
		"another tap":     func(r *lv1.SandboxReady) { r.ObservedTapAddress = "10.9.9.9/24" },
		"no probe":        func(r *lv1.SandboxReady) { r.NetworkProbeReport = "" },
	} {
		r := g.ready()
		mut(r)
		g.sup.Ready(r)
		if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) {
			t.Errorf("SandboxReady with %s: %v", name, err)
		}
		if n := g.participant(t, participant.Network).Phase; n != participant.Intent {
			t.Fatalf("SandboxReady with %s: network %s", name, n)
		}
	}
	g.s.Release()
	g.sup.Ready(g.ready())
	if _, err := g.deliver(t); err == nil {
		t.Fatal("SandboxReady after Release accepted")
	}
	if h, n := g.phases(t); h != participant.ReleaseIntent || n != participant.ReleaseIntent {
		t.Fatalf("after the late SandboxReady: helper %s, network %s", h, n)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
}

// TestSupervisorAllowlistEgress (allowlist mode): the hello must name a
// sandbox namespace of its own (not RS's); SandboxReady before the proxy
// was staged is refused; a staged proxy of another boot is refused
// unacknowledged, the valid one acknowledged with the exact echo, a
// duplicate refused; SandboxReady naming another proxy, or a sandbox
// namespace routed beyond the proxy, is refused; the staged proxy with
// the proxy's route only commits the network.
func TestSupervisorAllowlistEgress(t *testing.T) {
	g := newSupervised(t, allowlist)
	if !g.s.Allowlist() {
		t.Fatal("the profile's allowlist mode was not derived")
	}
	g.launch(t)
	if spec := g.s.EgressSpec(); spec == nil || spec.Dns == "" {
		t.Fatalf("egress spec %v", spec)
	}
	g.sup.Hello(&lv1.SupervisorHello{})
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "reports none") {
		t.Fatalf("hello without a sandbox namespace: %v", err)
	}
	// RS's main thread's namespace is RS's own.
	pid := g.rs.Handle().PID()
	dev, ino, err := pidfs.NamespaceOfPath(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	g.sup.Hello(&lv1.SupervisorHello{SandboxNetNamespace: &lv1.NamespaceIdentity{Dev: dev, Ino: ino}, SandboxNetnsTid: uint32(pid)})
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "runtime supervisor's own") {
		t.Fatalf("hello naming RS's namespace as the sandbox's: %v", err)
	}
	proxy := startProcess(t)
	g.sup.Ready(g.allowlistReady(store.IdentityProto(proxy.id)))
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "not staged") {
		t.Fatalf("SandboxReady before the proxy was staged: %v", err)
	}
	other := g.stagedProxy(t, proxy.id)
	other.Identity.BootId = make([]byte, 16)
	g.sup.Staged(other)
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "boot") {
		t.Fatalf("staged proxy of another boot: %v", err)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	o := g.stagedProxy(t, proxy.id)
	g.sup.Staged(o)
	if _, err := g.deliver(t); err != nil {
		t.Fatalf("staged proxy: %v", err)
	}
	g.sup.ExpectSignedAckOf(g.coord, o)
	g.sup.Staged(g.stagedProxy(t, proxy.id))
	if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate staged proxy: %v", err)
	}
	g.sup.ExpectSilence(50 * time.Millisecond)
	for name, r := range map[string]*lv1.SandboxReady{
		"another proxy": g.allowlistReady(store.IdentityProto(g.rs.Identity())),
		"a wider route": func() *lv1.SandboxReady {
			r := g.allowlistReady(store.IdentityProto(proxy.id))
			r.ObservedSandboxRoutes = append(r.ObservedSandboxRoutes, fmt.Sprintf("0.0.0.0/0 via 10.0.3.1 dev %s", netsetup.SandboxLink))
			return r
		}(),
		"no route": func() *lv1.SandboxReady {
			r := g.allowlistReady(store.IdentityProto(proxy.id))
			r.ObservedSandboxRoutes = nil
			return r
		}(),
	} {
		g.sup.Ready(r)
		if _, err := g.deliver(t); !errors.Is(err, errdefs.ErrRefused) {
			t.Errorf("SandboxReady with %s: %v", name, err)
		}
	}
	if n := g.participant(t, participant.Network).Phase; n != participant.Intent {
		t.Fatalf("a refused SandboxReady moved the network to %s", n)
	}
	g.sup.Ready(g.allowlistReady(store.IdentityProto(proxy.id)))
	if _, err := g.deliver(t); err != nil {
		t.Fatalf("SandboxReady: %v", err)
	}
	if n := g.participant(t, participant.Network); n.Phase != participant.Committed || !n.Snapshot.GetNetwork().GetReadiness().GetPermitObserved() {
		t.Fatalf("network after SandboxReady: %s %v", n.Phase, n.Snapshot)
	}
}

// TestRecoverDeadGeneration: the coordinator died with helper and network
// committed; the next coordinator (the store reopened) retains both while
// RS or the helper is not proven absent, signalling neither, and records
// both Clean with the proof once they are gone.
func TestRecoverDeadGeneration(t *testing.T) {
	g := newSupervised(t)
	g.launch(t)
	g.sup.Ready(g.ready())
	if _, err := g.deliver(t); err != nil {
		t.Fatal(err)
	}
	helper := g.participant(t, participant.Helper).View.Slots["helper"].Identity
	g.st = storetest.Reopen(t, g.st, g.dir, g.lock)
	refusals := Recover(g.st, 1, absence)
	if len(refusals) == 0 || !strings.Contains(refusals[0], "helper helper") {
		t.Fatalf("recovery with helper and RS alive: %v", refusals)
	}
	if h, n := g.phases(t); h != participant.Committed || n != participant.Committed {
		t.Fatalf("retained records moved: helper %s, network %s", h, n)
	}
	if !running(helper) || !running(g.rs.Identity()) {
		t.Fatal("recovery signalled a recorded process it did not prove absent")
	}
	g.s.Stop() // the helper exits on its exit fd
	if refusals := Recover(g.st, 1, absence); len(refusals) == 0 || !strings.Contains(refusals[0], "supervisor") {
		t.Fatalf("recovery with RS alive: %v", refusals)
	}
	g.rs.Signal(unix.SIGKILL)
	<-g.rs.Done()
	if refusals := Recover(g.st, 1, absence); len(refusals) != 0 {
		t.Fatalf("recovery: %v", refusals)
	}
	if h, n := g.phases(t); h != participant.Clean || n != participant.Clean {
		t.Fatalf("after recovery: helper %s, network %s", h, n)
	}
}

// TestRecoverNewerRecordRefused: a helper or network record a newer build
// wrote is refused, naming it; nothing is matched or recorded Clean.
func TestRecoverNewerRecordRefused(t *testing.T) {
	for _, role := range []participant.Role{participant.Helper, participant.Network} {
		t.Run(string(role), func(t *testing.T) {
			g := newSupervised(t)
			g.launch(t)
			g.s.Stop()
			g.rs.Signal(unix.SIGKILL)
			<-g.rs.Done()
			g.st = storetest.NewerParticipant(t, g.st, g.dir, g.lock, 1, role)
			refusals := Recover(g.st, 1, absence)
			if len(refusals) == 0 || !strings.Contains(strings.Join(refusals, "; "), "record_version") {
				t.Fatalf("recovery of a newer %s record: %v", role, refusals)
			}
			if err := g.st.View(func(tx *store.Tx) error { _, err := tx.Participant(1, role); return err }); !errors.Is(err, errdefs.ErrRefused) {
				t.Fatalf("the newer %s record was rewritten: %v", role, err)
			}
		})
	}
}

// running reports whether the recorded process id still runs.
func running(id pidfs.Identity) bool {
	h, err := pidfs.RecoveryMatch(id)
	if err != nil {
		return false
	}
	defer h.Close()
	done, err := h.Terminated()
	return err == nil && !done
}
