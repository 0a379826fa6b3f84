package rs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netsetup"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
)

// egressReadyTimeout bounds the egress proxy's start (it binds two
// listeners).
const egressReadyTimeout = 10 * time.Second

// egressProxy is the allowlist mode's egress proxy, a child of RS in RS's
// network namespace (where the connectivity helper's tap and the IP policy
// are): its outbound connections leave through slirp4netns under the deny
// routes, and the sandbox reaches it over the veth pair of the sandbox's
// own namespace. It dies with RS (the broker's PDEATHSIG) and is stopped
// through its pidfd at teardown.
type egressProxy struct {
	child *proc.Child
	stdin *os.File // closing it ends the proxy
	ask   *os.File // RS's end of the ask socket
	mu    sync.Mutex
	// closed: the ask socket is closed (under mu).
	closed bool
}

// peekPolicyMode reads the policy memfd's mode without consuming the
// descriptor (checkPolicy verifies the digest later): RS needs it before
// its hello to create the sandbox's network namespace.
func peekPolicyMode(fd int) (netpolicy.Mode, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("read the network policy: %w", err)
	}
	if st.Size > netpolicy.MaxCanonicalSize {
		return "", errdefs.New(errdefs.ErrRefused, "the network policy memfd holds %d bytes, more than %d", st.Size, netpolicy.MaxCanonicalSize)
	}
	b := make([]byte, st.Size)
	n, err := unix.Pread(fd, b, 0)
	if err != nil {
		return "", fmt.Errorf("read the network policy: %w", err)
	}
	p, err := netpolicy.Decode(b[:n])
	if err != nil {
		return "", errdefs.Mark(err, errdefs.ErrCorrupt)
	}
	return p.Mode, nil
}

// checkEgress checks that the policy's mode, the sandbox namespace and
// StartSandbox's egress spec agree.
func (s *supervisor) checkEgress() error {
	allowlist := s.policy.Mode == netpolicy.ModeAllowlist
	switch {
	case allowlist && (s.sandboxNS == nil || s.start.Egress == nil):
		return errdefs.New(errdefs.ErrRefused, "the allowlist network policy needs the sandbox network namespace and an egress proxy spec")
	case !allowlist && (s.sandboxNS != nil || s.start.Egress != nil):
		return errdefs.New(errdefs.ErrRefused, "StartSandbox asks for an egress proxy but the network policy is not in the allowlist mode")
	}
	if allowlist {
		if _, err := netip.ParseAddrPort(s.start.Egress.Dns); err != nil {
			return errdefs.New(errdefs.ErrInvalid, "egress proxy DNS %q: %v", s.start.Egress.Dns, err)
		}
	}
	return nil
}

// startEgress builds the veth pair and starts the proxy; it returns once
// both listeners are bound.
func (s *supervisor) startEgress() error {
	if err := s.sandboxNS.Configure(netpolicy.ProxyAddr, netpolicy.SandboxAddr, netpolicy.ProxyPrefix.Bits()); err != nil {
		return err
	}
	exe := s.rolesExe
	pol, err := fdpass.SealedMemfd("lazaret-egress-policy", s.policy.Canonical())
	if err != nil {
		return err
	}
	defer pol.Close()
	// Read-write: a bounded rewrite keeps earlier generations' entries.
	denials, err := os.OpenFile(s.start.Egress.DenialsPath, os.O_RDWR|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("open the denial log: %w", err)
	}
	defer denials.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ask socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "egress-ask"), os.NewFile(uintptr(fds[1]), "egress-ask-proxy")
	defer theirs.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		mine.Close()
		return err
	}
	defer inR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		mine.Close()
		inW.Close()
		return err
	}
	defer outR.Close()
	addr := func(port int) string { return netip.AddrPortFrom(netpolicy.ProxyAddr, uint16(port)).String() }
	dns := netip.MustParseAddrPort(s.start.Egress.Dns) // checked in checkEgress
	args := append([]string{exe}, egress.Args(3, s.start.Profile, dns, addr(netpolicy.HTTPPort), addr(netpolicy.SOCKSPort), 4, 5)...)
	args = append(args, "--log-level="+s.logLevel())
	child, err := s.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "egress_proxy",
		ExecStop: true,
		Target:   proc.Command{Path: exe, Args: args, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/", Files: []*os.File{inR, outW, os.Stderr, pol, denials, theirs}},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			return s.stageSlot(ctx, "egress_proxy", id)
		},
	})
	outW.Close()
	if err != nil {
		mine.Close()
		inW.Close()
		return err
	}
	failpoint.Hit("lazaret-rs:egress-acquired")
	s.egress = &egressProxy{child: child, stdin: inW, ask: mine}
	s.asks = s.egress
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == egress.ReadyLine {
				ready <- nil
				return
			}
		}
		ready <- errdefs.New(errdefs.ErrUnavailable, "the egress proxy exited before it listened")
	}()
	select {
	case err = <-ready:
	case <-time.After(egressReadyTimeout):
		err = errdefs.New(errdefs.ErrUnavailable, "the egress proxy did not listen within %s", egressReadyTimeout)
	case <-s.hcGone:
		err = errdefs.New(errdefs.ErrUnavailable, "host coordinator gone during start")
	}
	if err != nil {
		s.stopEgress()
		return err
	}
	go s.relayAsks(mine)
	return nil
}

func (s *supervisor) logLevel() string {
	if s.log.Enabled(context.Background(), -4) {
		return "debug"
	}
	return "info"
}

// relayAsks forwards the proxy's questions to HC (NetworkAsk); HC's
// answers come back through answerAsk.
func (s *supervisor) relayAsks(f *os.File) {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		var m egress.AskMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			s.log.Warn("egress proxy sent a malformed ask; ignoring it", "err", err)
			continue
		}
		if err := s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_NetworkAsk{NetworkAsk: &lv1.NetworkAsk{
			Id: m.ID, Session: m.Session, Host: m.Host, Port: uint32(m.Port), Via: m.Via,
		}}}); err != nil {
			s.answerAsk(&lv1.NetworkDecision{Id: m.ID, Decision: "deny"})
		}
	}
}

// answerAsk writes HC's decision to the proxy (the coordinator-message
// goroutine; s.asks is set before any ask can arrive and never changes).
func (s *supervisor) answerAsk(d *lv1.NetworkDecision) {
	e := s.asks
	if e == nil {
		return
	}
	b, err := json.Marshal(egress.DecisionMessage{ID: d.Id, Decision: egress.Decision(d.Decision)})
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if _, err := e.ask.Write(append(b, '\n')); err != nil {
		s.log.Warn("egress proxy ask socket", "err", err)
	}
}

// readSandboxRoutes reads and checks the sandbox namespace's routes (before
// runsc imports them) as evidence.
func (s *supervisor) readSandboxRoutes() ([]netsetup.Route, error) {
	routes, err := s.sandboxNS.Routes()
	if err != nil {
		return nil, err
	}
	connected := netpolicy.ProxyPrefix
	if err := netsetup.VerifySandboxRoutes(routes, connected); err != nil {
		return nil, errdefs.Mark(err, errdefs.ErrRefused)
	}
	return routes, nil
}

// stopEgress ends the proxy: stdin EOF, then SIGKILL through its pidfd if
// it lingers.
func (s *supervisor) stopEgress() {
	e := s.egress
	if e == nil {
		return
	}
	s.egress = nil
	e.stdin.Close()
	select {
	case <-e.child.Done():
	case <-time.After(stopGrace):
		s.log.Warn("egress proxy did not exit at stdin EOF: SIGKILL through its pidfd")
		e.child.Signal(unix.SIGKILL)
		<-e.child.Done()
	}
	e.mu.Lock()
	e.closed = true
	e.ask.Close()
	e.mu.Unlock()
}

// egressIdentity is the proxy's identity for SandboxReady.
func (s *supervisor) egressIdentity() *lv1.PidfsProcessIdentityV1 {
	if s.egress == nil {
		return nil
	}
	return identityProto(s.egress.child.Identity())
}

// egressDone is closed when the proxy exits (never, without one).
func (s *supervisor) egressDone() <-chan struct{} {
	if s.egress == nil {
		return nil
	}
	return s.egress.child.Done()
}
