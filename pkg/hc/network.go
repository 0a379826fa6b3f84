package hc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/slirp"
	"github.com/lazaret/lazaret/pkg/store"
)

// Network timing.
var (
	helperReadyTimeout = 10 * time.Second
	helperStopWait     = 5 * time.Second
	// dnsProbeBound is how long the readiness probe waits for the DNS
	// forwarder: an answer proves it; silence (an offline host) is
	// recorded as a warning and does not block the start.
	dnsProbeBound = 1500 * time.Millisecond
)

// networkState is the generation's network: the connectivity helper
// (slirp4netns, the spec's Network Sidecar), its addressing, the readiness
// fingerprint and the probe spec the sandbox init runs.
type networkState struct {
	sidecarID   string
	addr        slirp.Network
	netns       *lv1.NamespaceIdentity
	fingerprint [32]byte
	probe       netprobe.Spec
	helper      *proc.Child
	exitW       *os.File // the helper's --exit-fd peer: closing it stops the helper
	verdict     *netprobe.Verdict
	pinnedHosts map[string][]string // allow_hosts → the addresses pinned
	ports       []forwardedPort     // host ports forwarded into the sandbox
	etcFiles    map[string]string   // guest /etc file → the generation's host file
	started     chan struct{}       // closed when the helper's start attempt ended
	// helperReady delivers the helper start's outcome once: the attached
	// runsc's staged ownership is acknowledged (and runsc runs) only after
	// it, while the lower, State Anchors and Git routing are prepared in
	// parallel with the helper's start.
	helperReady <-chan error
}

// readinessFingerprint is the network readiness fingerprint (FR-18): a
// digest over the Domain ID, generation, configuration fingerprint, Network
// Sidecar ID, policy digest and the RS netns identity, each length-framed.
func (c *coordinator) readinessFingerprint(netns *lv1.NamespaceIdentity) [32]byte {
	h := sha256.New()
	put := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	num := func(v uint64) []byte { var b [8]byte; binary.BigEndian.PutUint64(b[:], v); return b[:] }
	d := c.policy.Digest()
	put([]byte("lazaret/v1/network-readiness"))
	put([]byte(c.paths.ID))
	put(num(c.generation))
	put([]byte(c.profile.Fingerprint()))
	put([]byte(c.net.sidecarID))
	put(d[:])
	put(num(netns.GetDev()))
	put(num(netns.GetIno()))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// prepareNetwork fixes the generation's network identity from RS's netns
// (read through RS's pidfd; the hello is checked against it later): the
// readiness fingerprint, the probe spec, and the sandbox's name-service
// files.
func (c *coordinator) prepareNetwork(netns *lv1.NamespaceIdentity) error {
	addr, err := slirp.NetworkFor(slirp.DefaultCIDR)
	if err != nil {
		return err
	}
	c.net.addr, c.net.netns = addr, netns
	c.net.fingerprint = c.readinessFingerprint(netns)
	c.net.probe = netprobe.Spec{
		Version: netprobe.Version, Fingerprint: hex.EncodeToString(c.net.fingerprint[:]),
		Deny: c.policy.Deny, Allow: c.policy.Allow, Connected: addr.CIDR,
		Gateway: addr.Gateway, Guest: addr.Guest, DNS: addr.DNS, DNSBound: dnsProbeBound,
	}
	resolver := addr.DNS
	if c.allowlist() {
		// The sandbox's namespace routes only to the egress proxy: every
		// prefix the policy names, and both halves of the address space,
		// must be unreachable there.
		probe := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")}
		probe = append(append(probe, c.policy.Deny...), c.policy.Allow...)
		c.net.probe = netprobe.Spec{
			Version: netprobe.Version, Fingerprint: hex.EncodeToString(c.net.fingerprint[:]), Mode: netprobe.ModeAllowlist,
			Deny: probe, Connected: netpolicy.ProxyPrefix,
			Proxy: netip.AddrPortFrom(netpolicy.ProxyAddr, netpolicy.HTTPPort),
		}
		// No resolver inside: names are the proxy's to resolve. A lookup
		// goes to the proxy's address, where nothing answers DNS, and
		// fails at once.
		resolver = netpolicy.ProxyAddr
	}
	dir := filepath.Join(c.paths.RuntimeDir, "etc")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	files := map[string][]byte{
		"resolv.conf":        fmt.Appendf(nil, "# Lazaret: the connectivity helper's DNS forwarder (generation %d)\nnameserver %s\n", c.generation, resolver),
		"hosts":              fmt.Appendf(nil, "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n", c.hostname),
		"hostname":           []byte(c.hostname + "\n"),
		"helper-resolv.conf": slirp.ResolvConf(c.policy.Resolvers),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	c.net.etcFiles = map[string]string{
		"/etc/resolv.conf": filepath.Join(dir, "resolv.conf"),
		"/etc/hosts":       filepath.Join(dir, "hosts"),
		"/etc/hostname":    filepath.Join(dir, "hostname"),
	}
	return nil
}

func helperSnapshot(s *lv1.HelperSnapshotV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Helper{Helper: s}}
}

func networkSnapshot(s *lv1.NetworkSnapshotV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Network{Network: s}}
}

// startHelper commits the helper and network participants' Intent, then
// acquires slirp4netns through the causal broker joining RS's netns by
// RS's pid, and waits for its ready signal (the tap is configured).
func (c *coordinator) startHelper() error {
	nsenter, err := locate.Find("nsenter", os.Getenv)
	if err != nil {
		return err
	}
	slirpPath, err := locate.Find("slirp4netns", os.Getenv)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("%w (install the slirp4netns package: `make setup` does)", err), errdefs.ErrUnsupportedHost)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	policyDigest := c.policy.Digest()
	if err := c.store.Update(func(tx *store.Tx) error {
		if err := tx.PutParticipant(c.generation, participant.Helper, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(c.generation, participant.Network, participant.Intent, networkSnapshot(&lv1.NetworkSnapshotV1{
			Netns: c.net.netns, ReadinessFingerprint: c.net.fingerprint[:], PolicyDigest: policyDigest[:], Supervisor: unassignedSlot(),
		}))
	}); err != nil {
		return err
	}
	exitR, exitW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		exitR.Close()
		exitW.Close()
		return err
	}
	defer readyR.Close()
	rsPID := c.rsChild.Handle().PID() // our unreaped child: the pid names it
	chain := slirp.Chain{Nsenter: nsenter, Self: self, Slirp: slirpPath, ResolvConf: filepath.Join(c.paths.RuntimeDir, "etc", "helper-resolv.conf"),
		SupervisorPID: rsPID, Network: c.net.addr, ExitFD: 3, ReadyFD: 4, APISocket: c.apiSocket()}
	child, err := c.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot: "helper",
		Target: proc.Command{Path: nsenter, Args: chain.Argv(), Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/",
			Files: []*os.File{nil, os.Stderr, os.Stderr, exitR, readyW}},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			return c.store.Update(func(tx *store.Tx) error {
				return tx.PutParticipant(c.generation, participant.Helper, participant.Intent, helperSnapshot(&lv1.HelperSnapshotV1{
					Netns: c.net.netns, Helper: store.StagedSlot(id), Supervisor: unassignedSlot(),
				}))
			})
		},
	})
	exitR.Close()
	readyW.Close()
	if err != nil {
		exitW.Close()
		return fmt.Errorf("start the connectivity helper (slirp4netns): %w", err)
	}
	c.mu.Lock()
	c.net.helper, c.net.exitW = child, exitW
	c.mu.Unlock()
	failpoint.Hit("lazaret-hc:helper-started")
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		n, err := readyR.Read(b)
		if n == 1 && b[0] == '1' {
			ready <- nil
			return
		}
		ready <- fmt.Errorf("ready signal %q: %v", b[:n], err)
	}()
	select {
	case err := <-ready:
		if err != nil {
			return errdefs.New(errdefs.ErrUnavailable, "the connectivity helper (slirp4netns) failed to configure the sandbox network (%v); its messages are in %s", err, c.paths.Log())
		}
	case <-child.Done():
		st, _ := child.Status()
		return errdefs.New(errdefs.ErrUnavailable, "the connectivity helper (slirp4netns) exited during start (%s); its messages are in %s", st, c.paths.Log())
	case <-time.After(helperReadyTimeout):
		return errdefs.New(errdefs.ErrUnavailable, "the connectivity helper (slirp4netns) was not ready within %s; see %s", helperReadyTimeout, c.paths.Log())
	}
	c.failOnUnexpectedExit(child, "the connectivity helper (slirp4netns) exited unexpectedly: the Domain stops")
	c.timing.Mark("connectivity helper ready")
	c.log.Info("connectivity helper ready", "helper", child.Identity().String(), "tap", slirp.Tap, "cidr", c.net.addr.CIDR.String())
	return c.forwardProfilePorts()
}

// commitNetwork runs after the sandbox participant is Committed (RS is then
// the committed supervisor): it commits the helper's exact staged identity
// with RS as its direct supervisor, judges the sandbox's readiness probe,
// and commits the network participant with the evidence. Publication is
// refused (fail closed) unless the probe proves the policy.
func (c *coordinator) commitNetwork(r *lv1.SandboxReady) error {
	rsID := c.rsChild.Identity()
	helperID := c.net.helper.Identity()
	if err := c.store.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(c.generation, participant.Helper, participant.Committed, helperSnapshot(&lv1.HelperSnapshotV1{
			Netns: c.net.netns, Helper: store.CommittedSlot(helperID), Supervisor: store.CommittedSlot(rsID),
		}))
	}); err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:helper-committed")
	if tap, err := netip.ParsePrefix(r.ObservedTapAddress); err != nil || tap.Addr() != c.net.addr.Guest {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor observed tap address %q, not the connectivity helper's %s", r.ObservedTapAddress, c.net.addr.Guest)
	}
	if r.NetworkProbeReport == "" {
		return errdefs.New(errdefs.ErrRefused, "the sandbox reported no network readiness probe: refusing to publish (are lazaret-hc and lazaret-escalate from the same build?)")
	}
	rep, err := netprobe.ParseLine(r.NetworkProbeReport)
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrRefused)
	}
	c.log.Info("network readiness probe", "report", r.NetworkProbeReport)
	v := netprobe.Judge(c.net.probe, rep)
	c.mu.Lock()
	c.net.verdict = &v
	c.mu.Unlock()
	for _, w := range v.Warnings {
		c.log.Warn("network readiness", "warning", w)
		c.addProgress("warning: " + w)
	}
	if !v.Ready() {
		return errdefs.New(errdefs.ErrRefused, "network readiness not proven, refusing to publish the Domain: %s. Check the profile's network settings (`lazaret config check`) and %s", strings.Join(v.Problems, "; "), c.paths.Log())
	}
	digest := c.policy.Digest()
	ev := &lv1.NetworkReadinessEvidenceV1{
		Generation: c.generation, ReadinessFingerprint: c.net.fingerprint[:], PolicyDigest: digest[:], Netns: c.net.netns,
		Supervisor: store.IdentityProto(rsID), DenyObserved: v.DenyObserved, PermitObserved: v.PermitObserved, DnsObserved: v.DNSObserved,
		ObservedRoutes: r.ObservedRoutes,
	}
	if err := c.store.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(c.generation, participant.Network, participant.Committed, networkSnapshot(&lv1.NetworkSnapshotV1{
			Netns: c.net.netns, ReadinessFingerprint: c.net.fingerprint[:], PolicyDigest: digest[:], Readiness: ev, Supervisor: store.CommittedSlot(rsID),
		}))
	}); err != nil {
		return err
	}
	c.timing.Mark("network readiness judged")
	c.log.Info("network ready", "readiness_fingerprint", hex.EncodeToString(c.net.fingerprint[:]), "deny_observed", v.DenyObserved, "permit_observed", v.PermitObserved, "dns_observed", v.DNSObserved, "fail_fast", strings.Join(v.FailFast, "; "))
	return nil
}

// releaseNetworkRecords records ReleaseIntent for the network and helper
// participants (keeping identities) before their resources are stopped.
func (c *coordinator) releaseNetworkRecords() {
	for _, role := range []participant.Role{participant.Network, participant.Helper} {
		if err := c.store.Update(func(tx *store.Tx) error {
			p, err := tx.Participant(c.generation, role)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil || p.Phase == participant.ReleaseIntent || p.Phase == participant.Clean || p.Snapshot == nil {
				return err
			}
			return tx.ReleaseParticipant(c.generation, role)
		}); err != nil {
			c.log.Error("record release intent", "role", string(role), "err", err)
		}
	}
}

// stopHelper ends the helper: closing the exit-fd peer makes slirp4netns
// exit; a helper that lingers is killed through its pidfd. It returns
// whether the helper is reaped.
func (c *coordinator) stopHelper() bool {
	c.mu.Lock()
	started := c.net.started
	c.mu.Unlock()
	if started != nil {
		<-started // an acquisition in flight ends (bounded) first
	}
	c.mu.Lock()
	h, w := c.net.helper, c.net.exitW
	c.net.exitW = nil
	c.mu.Unlock()
	if w != nil {
		w.Close()
	}
	if h == nil {
		return true
	}
	select {
	case <-h.Done():
	case <-time.After(helperStopWait):
		c.log.Error("connectivity helper did not exit on its exit fd: SIGKILL through its pidfd")
		h.Signal(unix.SIGKILL)
		<-h.Done()
	}
	failpoint.Hit("lazaret-hc:helper-stopped")
	return true
}

// finishNetwork records the helper and network participants Clean after
// teardown: the helper was reaped by this coordinator, RS too (the netns,
// and with it every route, is gone with its last process).
func (c *coordinator) finishNetwork(rs *proc.Child) {
	var rsGone []pidfs.Authority
	if rs != nil {
		select {
		case <-rs.Done():
			rsGone = append(rsGone, rs.Identity().Authority)
		default:
			c.log.Error("runtime supervisor not reaped: network stays in release intent")
			return
		}
	}
	if err := c.releaseAndClean(c.generation, participant.Network, "normal teardown: runtime supervisor reaped, its network namespace is gone", rsGone); err != nil {
		c.log.Error("record network clean", "err", err)
	}
	helperGone := rsGone
	if h := c.net.helper; h != nil {
		select {
		case <-h.Done():
			helperGone = append(append([]pidfs.Authority(nil), rsGone...), h.Identity().Authority)
		default:
			c.log.Error("connectivity helper not reaped: helper stays in release intent")
			return
		}
	}
	if err := c.releaseAndClean(c.generation, participant.Helper, "normal teardown: connectivity helper and runtime supervisor reaped", helperGone); err != nil {
		c.log.Error("record helper clean", "err", err)
	}
}

// recoverNetwork is bootstrap recovery of a dead generation's helper and
// network participants: every recorded process (the helper; RS) is proven
// absent through PidfsRecoveryMatch (a surviving helper is stopped through
// its matched pidfd), then both are recorded Clean. It returns refusals.
func (c *coordinator) recoverNetwork(g uint64) []string {
	var refusals []string
	for _, role := range []participant.Role{participant.Helper, participant.Network} {
		var p *store.Participant
		c.store.View(func(tx *store.Tx) error {
			var err error
			p, err = tx.Participant(g, role)
			return err
		})
		if p == nil || p.Phase == participant.Clean {
			continue
		}
		var absent []pidfs.Authority
		for _, name := range []string{"helper", "supervisor"} {
			s, ok := p.View.Slots[name]
			if !ok || s.State == participant.Unassigned {
				continue
			}
			if s.Legacy != nil {
				refusals = append(refusals, fmt.Sprintf("%s %s: legacy-unverified identity", role, name))
				continue
			}
			if err := c.awaitAbsence(s.Identity); err != nil {
				refusals = append(refusals, fmt.Sprintf("%s %s %s: %v", role, name, s.Identity, err))
				continue
			}
			absent = append(absent, s.Identity.Authority)
		}
		if len(refusals) > 0 {
			return refusals
		}
		if err := c.releaseAndClean(g, role, "bootstrap recovery: recorded processes proven absent by PidfsRecoveryMatch", absent); err != nil {
			return []string{fmt.Sprintf("%s: %v", role, err)}
		}
	}
	return nil
}

// hostResolveTimeout bounds the resolution of a profile's allow_hosts.
var hostResolveTimeout = 5 * time.Second

// resolveAllowHosts resolves the profile's network.allow_hosts through the
// Domain's resolvers (the host's when the profile names none) into exact
// /32 allow rules, pinned for the generation: gVisor imports routes only at
// boot, so a later DNS change takes effect at the next generation. A name
// that does not resolve is reported and left out (an offline host still
// starts).
func (c *coordinator) resolveAllowHosts(resolvers []netip.Addr) []netpolicy.Rule {
	hosts := c.profile.Network.AllowHosts
	if len(hosts) == 0 {
		return nil
	}
	r := net.DefaultResolver
	if len(c.profile.Network.DNS) > 0 {
		servers := c.profile.Network.DNS
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, netip.AddrPortFrom(servers[0], 53).String())
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostResolveTimeout)
	defer cancel()
	type result struct {
		host  string
		addrs []netip.Addr
		err   error
	}
	results := make(chan result, len(hosts))
	for _, h := range hosts {
		go func() {
			as, err := r.LookupNetIP(ctx, "ip4", h)
			results <- result{h, as, err}
		}()
	}
	pinned := map[string][]string{}
	var rules []netpolicy.Rule
	for range hosts {
		res := <-results
		if res.err != nil || len(res.addrs) == 0 {
			msg := fmt.Sprintf("network.allow_hosts %s did not resolve (%v): it is not reachable in this generation", res.host, res.err)
			c.log.Warn("allow host unresolved", "host", res.host, "err", res.err)
			c.addProgress("warning: " + msg)
			pinned[res.host] = []string{}
			continue
		}
		for _, a := range res.addrs {
			a = a.Unmap()
			if !a.Is4() {
				continue
			}
			rules = append(rules, netpolicy.Rule{Prefix: netip.PrefixFrom(a, 32), Source: fmt.Sprintf("profile %s network.allow_hosts %s", c.profile.Name, res.host)})
			pinned[res.host] = append(pinned[res.host], a.String())
		}
	}
	c.mu.Lock()
	c.net.pinnedHosts = pinned
	c.mu.Unlock()
	c.log.Info("allow hosts pinned for the generation", "hosts", fmt.Sprint(pinned))
	return rules
}

// networkStatusLocked is the network part of `lazaret status`.
func (c *coordinator) networkStatusLocked() *lv1.NetworkStatus {
	n := &lv1.NetworkStatus{HelperCidr: proto.String(slirp.DefaultCIDR.String())}
	if c.net.helper != nil {
		n.ConnectivityHelper = proto.String(c.net.helper.Identity().String())
	}
	if c.net.fingerprint != ([32]byte{}) {
		n.ReadinessFingerprint = proto.String(hex.EncodeToString(c.net.fingerprint[:]))
	}
	if v := c.net.verdict; v != nil {
		n.DenyObserved, n.PermitObserved, n.DnsObserved = proto.Bool(v.DenyObserved), proto.Bool(v.PermitObserved), proto.Bool(v.DNSObserved)
		n.Warnings = v.Warnings
		n.FailFast = v.FailFast
	}
	if c.net.pinnedHosts != nil {
		n.AllowHostsPinned = map[string]*structpb.ListValue{}
		for host, addrs := range c.net.pinnedHosts {
			l := &structpb.ListValue{}
			for _, a := range addrs {
				l.Values = append(l.Values, structpb.NewStringValue(a))
			}
			n.AllowHostsPinned[host] = l
		}
	}
	n.ForwardedPorts = c.portsStatusLocked()
	return n
}
