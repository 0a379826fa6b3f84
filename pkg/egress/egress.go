// Package egress is the egress proxy of a Domain's allowlist network mode.
//
// In that mode the sandbox's network namespace holds nothing but a link to
// the Runtime Supervisor's network namespace, where this proxy listens: an
// HTTP proxy (CONNECT, and plain HTTP requests with an absolute URI) and a
// SOCKS5 proxy (CONNECT) for other TCP, such as git over ssh. The proxy runs
// as a hidden role of lazaret-hc (Arg, Main; lazaret-rs hosts it too), a
// child of the Runtime Supervisor, so its own connections leave through the connectivity helper
// under the Domain's IP route policy as well.
//
// A request is allowed when its host name matches a host rule of the
// policy (netpolicy.Policy.AllowsHost), or when the developer approves it
// at the session's terminal (network.ask). The proxy then resolves the name
// itself and refuses it when any address is one the prefix policy does not
// permit (netpolicy.Policy.Permits: loopback, link-local, denied private
// space…), and connects only to an address it checked. A raw IP address is
// allowed only inside an allow prefix. TLS is never intercepted: CONNECT
// and SOCKS5 are byte splices. Every refusal goes to the Domain's denial log
// (DenialLog) and back to the client: an HTTP 403 naming the host, the port
// and the profile key that would allow it, or a SOCKS5 reply code.
//
// The session label (the proxy user name, "s-<session id>") attributes a
// request to a session for the denial log and for asking; it is not
// authentication — any process in the sandbox can claim any label.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

// Timeouts of one request's outbound steps. An established tunnel is
// never cut for being idle.
const (
	ResolveTimeout = 5 * time.Second
	ConnectTimeout = 10 * time.Second
)

// Config is what Serve needs.
type Config struct {
	Policy  netpolicy.Policy // Mode must be allowlist
	Profile string           // the Agent Profile's name, for messages
	// HTTP and SOCKS are the bound listeners of the HTTP and SOCKS5
	// proxies; either may be nil (not served), not both.
	HTTP, SOCKS net.Listener
	// Resolve returns a name's IPv4 addresses (NewResolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to a checked address; nil: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Ask puts a request outside the allowlist to the developer (used
	// when Policy.Ask); nil: such requests are denied as non-interactive.
	Ask        func(ctx context.Context, r AskRequest) (Decision, error)
	AskTimeout time.Duration // 0: DefaultAskTimeout
	Denials    *DenialLog    // nil: refusals are only logged
	Now        func() time.Time
	Log        *slog.Logger
}

type server struct {
	cfg   Config
	asker *asker
	log   *slog.Logger
	now   func() time.Time

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Serve serves cfg's listeners until ctx ends, then closes them and every
// connection and returns nil; it returns an error at once for a bad
// configuration, or when a listener fails.
func Serve(ctx context.Context, cfg Config) error {
	if cfg.Policy.Mode != netpolicy.ModeAllowlist {
		return errdefs.New(errdefs.ErrInvalid, "egress proxy: the policy's mode is %q, not allowlist", cfg.Policy.Mode)
	}
	if cfg.HTTP == nil && cfg.SOCKS == nil {
		return errdefs.New(errdefs.ErrInvalid, "egress proxy: no listener")
	}
	if cfg.Resolve == nil {
		return errdefs.New(errdefs.ErrInvalid, "egress proxy: no resolver")
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	if cfg.AskTimeout <= 0 {
		cfg.AskTimeout = DefaultAskTimeout
	}
	s := &server{cfg: cfg, log: cfg.Log, now: cfg.Now, conns: map[net.Conn]struct{}{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.Ask != nil && cfg.Policy.Ask {
		s.asker = &asker{ask: cfg.Ask, timeout: cfg.AskTimeout, allowed: map[string]bool{}, pending: map[string]*pendingAsk{}}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	n := 0
	for _, l := range []struct {
		ln     net.Listener
		handle func(context.Context, net.Conn)
	}{{cfg.HTTP, s.serveHTTP}, {cfg.SOCKS, s.serveSOCKS}} {
		if l.ln == nil {
			continue
		}
		n++
		go func() { errs <- s.accept(ctx, l.ln, l.handle) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		n--
	}
	cancel()
	for _, l := range []net.Listener{cfg.HTTP, cfg.SOCKS} {
		if l != nil {
			l.Close()
		}
	}
	for ; n > 0; n-- {
		<-errs
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *server) accept(ctx context.Context, ln net.Listener, handle func(context.Context, net.Conn)) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("egress proxy: accept on %s: %w", ln.Addr(), err)
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				c.Close()
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
			handle(ctx, c)
		}()
	}
}

// track registers an outbound connection so Serve's end closes it too.
func (s *server) track(c net.Conn) func() {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}
}

// request is one connection request from the sandbox.
type request struct {
	session string
	host    string // as requested: a name or an IPv4 literal
	port    uint16
	via     string
}

// refusalKind is how a refusal is reported to the client.
type refusalKind int

const (
	refusedByPolicy refusalKind = iota // HTTP 403, SOCKS 0x02
	unresolvable                       // HTTP 502, SOCKS 0x04
	badRequest                         // HTTP 400, SOCKS 0x02
	unreachable                        // HTTP 502, SOCKS 0x04 (0x05 when refused)
)

// refusal is why a request did not get a connection.
type refusal struct {
	kind    refusalKind
	Message string // for the client
	err     error  // the dial error, for unreachable
}

// open decides req and, when allowed, connects to a checked address.
func (s *server) open(ctx context.Context, req request) (net.Conn, *refusal) {
	p := s.cfg.Policy
	deny := func(reason, decision, addr, message string) (net.Conn, *refusal) {
		d := Denial{Session: req.session, Host: req.host, Port: req.port, Addr: addr, Via: req.via, Reason: reason, Decision: decision, Time: s.now()}
		if err := s.cfg.Denials.Record(d); err != nil {
			s.log.Warn("record a denial", "err", err)
		}
		s.log.Info("egress denied", "session", req.session, "host", req.host, "port", req.port, "addr", addr, "via", req.via, "reason", reason, "decision", decision)
		return nil, &refusal{kind: refusedByPolicy, Message: message}
	}
	target := fmt.Sprintf("%s:%d", req.host, req.port)
	if req.port == 0 {
		return nil, &refusal{kind: badRequest, Message: fmt.Sprintf("lazaret: egress to %s: port 0 is not a destination", req.host)}
	}
	if a, err := netip.ParseAddr(req.host); err == nil {
		a = a.Unmap()
		if !a.Is4() {
			return deny("IPv6 address", DecisionDenied, a.String(), fmt.Sprintf("lazaret: egress to [%s]:%d denied by profile %s: IPv6 is disabled in the sandbox", a, req.port, s.cfg.Profile))
		}
		if !p.AllowCovers(a) || !p.Permits(a) {
			return deny("address outside network.allow", DecisionDenied, a.String(), fmt.Sprintf(
				"lazaret: egress to %s denied by profile %s (network.mode = \"allowlist\"): a raw IP address is allowed only inside network.allow; to allow it add \"%s/32\" to network.allow in the profile, or use its host name", target, s.cfg.Profile, a))
		}
		return s.dial(ctx, req, []netip.Addr{a})
	}
	host := netpolicy.NormalizeHost(req.host)
	if _, err := netpolicy.ParseHostRule(host); err != nil || strings.HasPrefix(host, "*") {
		return nil, &refusal{kind: badRequest, Message: fmt.Sprintf("lazaret: egress to %q: not a host name", req.host)}
	}
	req.host = host
	target = fmt.Sprintf("%s:%d", host, req.port)
	suggest := host
	for _, r := range p.Hosts {
		if r.Port != 0 && r.Match(host, r.Port) {
			suggest = target // the name is listed for another port
			break
		}
	}
	if _, ok := p.AllowsHost(host, req.port); !ok {
		switch {
		case !p.Ask:
			return deny("not in network.allow_hosts", DecisionDenied, "", fmt.Sprintf(
				"lazaret: egress to %s denied by profile %s (network.mode = \"allowlist\"); to allow it add %q to network.allow_hosts in the profile", target, s.cfg.Profile, suggest))
		case s.asker != nil && s.asker.remembered(host, req.port):
			// approved for this Domain's lifetime
		case req.session == "" || s.asker == nil:
			return deny("no session to ask", DecisionNonInteractive, "", fmt.Sprintf(
				"lazaret: egress to %s denied by profile %s (network.mode = \"allowlist\"): it is not in the allowlist and the request names no interactive session to ask (proxy user s-<session id>); to allow it add %q to network.allow_hosts in the profile", target, s.cfg.Profile, suggest))
		default:
			d, err := s.asker.decide(ctx, AskRequest{Session: req.session, Host: host, Port: req.port, Via: req.via})
			if err != nil {
				s.log.Info("ask failed: denied", "host", host, "port", req.port, "session", req.session, "err", err)
			}
			if d != AllowOnce && d != AllowDomain {
				reason := "denied at the terminal"
				if err != nil {
					reason = "not approved: " + err.Error()
				}
				return deny(reason, DecisionAskedDenied, "", fmt.Sprintf(
					"lazaret: egress to %s denied at the terminal (profile %s, network.ask = true); to allow it always add %q to network.allow_hosts in the profile", target, s.cfg.Profile, suggest))
			}
			s.log.Info("egress approved at the terminal", "host", host, "port", req.port, "session", req.session, "decision", string(d))
		}
	}
	rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	addrs, err := s.cfg.Resolve(rctx, host)
	cancel()
	var v4 []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			v4 = append(v4, a)
		}
	}
	if err != nil || len(v4) == 0 {
		if err == nil {
			err = errors.New("no IPv4 address")
		}
		s.log.Info("egress unresolvable", "host", host, "port", req.port, "session", req.session, "err", err)
		return nil, &refusal{kind: unresolvable, Message: fmt.Sprintf("lazaret: egress to %s: cannot resolve %s: %v", target, host, err)}
	}
	for _, a := range v4 {
		if p.Permits(a) {
			continue
		}
		what := netpolicy.SpecialKind(a)
		if what == "" {
			what = "denied by the network policy"
		} else {
			what = "a " + what + " address"
		}
		return deny("resolves to "+a.String()+" ("+what+")", DecisionDenied, a.String(), fmt.Sprintf(
			"lazaret: egress to %s denied by profile %s (network.mode = \"allowlist\"): %s resolves to %s, %s; to allow it add \"%s/32\" to network.allow in the profile", target, s.cfg.Profile, host, a, what, a))
	}
	return s.dial(ctx, req, v4)
}

// dial connects to the first of the checked addrs that answers.
func (s *server) dial(ctx context.Context, req request, addrs []netip.Addr) (net.Conn, *refusal) {
	var last error
	for _, a := range addrs {
		dctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
		c, err := s.cfg.Dial(dctx, "tcp4", netip.AddrPortFrom(a, req.port).String())
		cancel()
		if err == nil {
			s.log.Debug("egress connected", "session", req.session, "host", req.host, "port", req.port, "addr", a.String(), "via", req.via)
			return c, nil
		}
		last = err
	}
	s.log.Info("egress connect failed", "host", req.host, "port", req.port, "session", req.session, "err", last)
	return nil, &refusal{kind: unreachable, err: last, Message: fmt.Sprintf("lazaret: egress to %s: connect: %v", net.JoinHostPort(req.host, strconv.Itoa(int(req.port))), last)}
}

// connRefused reports whether err is a refused connection.
func connRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
