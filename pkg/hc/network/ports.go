package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/slirp"
)

// forwardedPort is one host port the connectivity helper forwards into the
// sandbox, for `lazaret status`.
type forwardedPort struct {
	port config.Port
	id   int    // the helper's forward id
	from string // "profile" or the session that asked (`lazaret run -P`)
}

// forwardPort makes the helper forward p (serialised by portsMu). A host
// address and port already forwarded to the same sandbox port is kept; to
// another sandbox port it is refused. The host port is bound once first, so
// that a port in use is reported as such (the helper only says its forward
// failed).
func (s *Service) forwardPort(p config.Port, from string) error {
	s.portsMu.Lock()
	defer s.portsMu.Unlock()
	s.mu.Lock()
	guest := s.addr.Guest
	for _, f := range s.ports {
		if f.port.Host() == p.Host() {
			s.mu.Unlock()
			if f.port.GuestPort == p.GuestPort {
				return nil
			}
			return errdefs.New(errdefs.ErrRefused, "host %s is already forwarded to sandbox port %d in this Domain (%s): choose another host port, e.g. -P %d:%d", p.Host(), f.port.GuestPort, f.from, p.HostPort+1, p.GuestPort)
		}
	}
	s.mu.Unlock()
	l, err := net.Listen("tcp4", p.Host())
	if err != nil {
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return errdefs.New(errdefs.ErrRefused, "cannot forward port %s: host %s is already in use by another program: stop it or choose another host port (e.g. %d:%d)", p, p.Host(), p.HostPort+1, p.GuestPort)
		case errors.Is(err, syscall.EACCES):
			return errdefs.New(errdefs.ErrRefused, "cannot forward port %s: host port %d is privileged (below 1024 only root may listen): choose a host port of 1024 or more, e.g. %d:%d", p, p.HostPort, 8000+int(p.HostPort), p.GuestPort)
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return errdefs.New(errdefs.ErrRefused, "cannot forward port %s: %s is not an address of this host: use 127.0.0.1 or one of the host's addresses", p, p.HostAddr)
		}
		return errdefs.Mark(fmt.Errorf("cannot forward port %s: %w", p, err), errdefs.ErrRefused)
	}
	l.Close()
	id, err := slirp.AddHostFwd(context.Background(), APISocket(s.cfg.RuntimeDir), slirp.HostFwd{HostAddr: p.HostAddr, HostPort: p.HostPort, GuestAddr: guest, GuestPort: p.GuestPort})
	if err != nil {
		return errdefs.Mark(fmt.Errorf("cannot forward port %s (is host %s in use now?): %w", p, p.Host(), err), errdefs.ErrRefused)
	}
	s.mu.Lock()
	s.ports = append(s.ports, forwardedPort{port: p, id: id, from: from})
	s.mu.Unlock()
	s.log.Info("port forwarded", "host", p.Host(), "sandbox_port", p.GuestPort, "from", from, "forward_id", id)
	return nil
}

// forwardProfilePorts forwards the profile's ports once the helper is
// ready; one that cannot be forwarded fails the start.
func (s *Service) forwardProfilePorts() error {
	for _, p := range s.cfg.Profile.Ports {
		if err := s.forwardPort(p, "profile"); err != nil {
			return err
		}
	}
	return nil
}

// ForwardSessionPorts forwards the ports a session asked for (`lazaret run
// -P`, canonical ADDR:HOST:GUEST) to the running helper; they last until
// the Domain stops. Only loopback host addresses are accepted: another
// address must be named in the trusted profile.
func (s *Service) ForwardSessionPorts(ports []string, sessionID string) error {
	for _, str := range ports {
		var p config.Port
		if err := p.UnmarshalText([]byte(str)); err != nil {
			return errdefs.Mark(err, errdefs.ErrInvalid)
		}
		if !p.HostAddr.IsLoopback() {
			return errdefs.New(errdefs.ErrRefused, "-P %s: a port forwarded from the command line listens on loopback only; name %s in the profile's ports to listen there", str, p.HostAddr)
		}
		if err := s.forwardPort(p, "lazaret run -P, session "+sessionID); err != nil {
			return err
		}
	}
	return nil
}

// portsStatusLocked lists the forwarded ports for `lazaret status`.
func (s *Service) portsStatusLocked() []*lv1.ForwardedPort {
	var out []*lv1.ForwardedPort
	for _, f := range s.ports {
		out = append(out, &lv1.ForwardedPort{Host: proto.String(f.port.Host()), SandboxPort: proto.Uint32(uint32(f.port.GuestPort)), From: proto.String(f.from)})
	}
	return out
}
