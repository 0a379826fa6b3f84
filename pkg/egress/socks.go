package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// SOCKS5 (RFC 1928, RFC 1929) constants.
const (
	socksVersion     = 5
	authNone         = 0x00
	authUserPass     = 0x02
	authNoAcceptable = 0xff
	cmdConnect       = 0x01
	atypIPv4         = 0x01
	atypDomain       = 0x03
	atypIPv6         = 0x04

	// Reply codes.
	RepSucceeded           = 0x00
	RepGeneralFailure      = 0x01
	RepNotAllowed          = 0x02 // connection not allowed by ruleset
	RepNetworkUnreachable  = 0x03
	RepHostUnreachable     = 0x04
	RepConnectionRefused   = 0x05
	RepCommandNotSupported = 0x07
	RepAddressNotSupported = 0x08
)

// socksHandshakeTimeout bounds the negotiation before CONNECT's reply.
const socksHandshakeTimeout = time.Minute

// serveSOCKS serves one SOCKS5 client: method negotiation (username and
// password preferred, so the session label arrives; no authentication
// accepted), one CONNECT, then a splice.
func (s *server) serveSOCKS(ctx context.Context, c net.Conn) {
	c.SetDeadline(time.Now().Add(socksHandshakeTimeout))
	br := bufio.NewReader(c)
	session, err := socksAuth(br, c)
	if err != nil {
		s.log.Debug("socks: negotiation", "err", err)
		return
	}
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || hdr[0] != socksVersion {
		return
	}
	var host string
	switch hdr[3] {
	case atypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(br, a[:]); err != nil {
			return
		}
		host = netip.AddrFrom4(a).String()
	case atypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return
		}
		host = string(name)
	case atypIPv6:
		socksReply(c, RepAddressNotSupported, nil)
		return
	default:
		socksReply(c, RepAddressNotSupported, nil)
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := binary.BigEndian.Uint16(pb[:])
	if hdr[1] != cmdConnect {
		socksReply(c, RepCommandNotSupported, nil)
		return
	}
	up, ref := s.open(ctx, request{session: session, host: host, port: port, via: "socks"})
	if ref != nil {
		code := byte(RepNotAllowed)
		switch {
		case ref.kind == unresolvable:
			code = RepHostUnreachable
		case ref.kind == unreachable && connRefused(ref.err):
			code = RepConnectionRefused
		case ref.kind == unreachable:
			code = RepHostUnreachable
		}
		socksReply(c, code, nil)
		return
	}
	defer s.track(up)()
	if err := socksReply(c, RepSucceeded, up.LocalAddr()); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	splice(c, up)
}

// socksAuth negotiates the method and returns the user name (the session
// label) of a username/password negotiation, "" without one.
func socksAuth(br *bufio.Reader, w io.Writer) (string, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return "", err
	}
	if hdr[0] != socksVersion {
		return "", fmt.Errorf("SOCKS version %d is not 5", hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return "", err
	}
	chosen := byte(authNoAcceptable)
	for _, m := range methods {
		if m == authUserPass {
			chosen = authUserPass
			break
		}
		if m == authNone {
			chosen = authNone
		}
	}
	if _, err := w.Write([]byte{socksVersion, chosen}); err != nil {
		return "", err
	}
	switch chosen {
	case authNone:
		return "", nil
	case authNoAcceptable:
		return "", errors.New("no acceptable authentication method")
	}
	// RFC 1929: VER=1 ULEN UNAME PLEN PASSWD. The label is attribution,
	// not authentication: every user name is accepted.
	ver, err := br.ReadByte()
	if err != nil {
		return "", err
	}
	if ver != 1 {
		w.Write([]byte{1, 1})
		return "", fmt.Errorf("username/password version %d is not 1", ver)
	}
	read := func() ([]byte, error) {
		n, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		b := make([]byte, n)
		_, err = io.ReadFull(br, b)
		return b, err
	}
	user, err := read()
	if err != nil {
		return "", err
	}
	if _, err := read(); err != nil {
		return "", err
	}
	if _, err := w.Write([]byte{1, 0}); err != nil {
		return "", err
	}
	return string(user), nil
}

func socksReply(w io.Writer, code byte, bound net.Addr) error {
	b := []byte{socksVersion, code, 0, atypIPv4, 0, 0, 0, 0, 0, 0}
	if ta, ok := bound.(*net.TCPAddr); ok {
		if ap := ta.AddrPort(); ap.Addr().Unmap().Is4() {
			a := ap.Addr().Unmap().As4()
			copy(b[4:8], a[:])
			binary.BigEndian.PutUint16(b[8:], ap.Port())
		}
	}
	_, err := w.Write(b)
	return err
}

// SOCKSError is a SOCKS5 server's refusal of a CONNECT.
type SOCKSError struct {
	Code       byte
	Host       string
	Port       uint16
	underlying error
}

func (e *SOCKSError) Error() string {
	what := map[byte]string{
		RepGeneralFailure:      "general failure",
		RepNotAllowed:          "connection not allowed by the network policy (see `lazaret network log`)",
		RepNetworkUnreachable:  "network unreachable",
		RepHostUnreachable:     "host unreachable or unresolvable",
		RepConnectionRefused:   "connection refused",
		RepCommandNotSupported: "command not supported",
		RepAddressNotSupported: "address type not supported",
	}[e.Code]
	if what == "" {
		what = fmt.Sprintf("reply code %#x", e.Code)
	}
	return fmt.Sprintf("egress proxy: %s:%d: %s", e.Host, e.Port, what)
}

func (e *SOCKSError) Unwrap() error { return e.underlying }

// DialSOCKS connects to host:port through the SOCKS5 proxy at proxy,
// sending user as the username (the session label; empty password) when
// it is not empty. A policy refusal is an *SOCKSError marked
// errdefs.ErrRefused.
func DialSOCKS(ctx context.Context, proxy, user, host string, port uint16) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", proxy)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: %w", proxy, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	conn, err := socksConnect(c, user, host, port)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return conn, nil
}

func socksConnect(c net.Conn, user, host string, port uint16) (net.Conn, error) {
	fail := func(err error) (net.Conn, error) { return nil, fmt.Errorf("egress proxy: SOCKS5 negotiation: %w", err) }
	greet := []byte{socksVersion, 1, authNone}
	if user != "" {
		greet = []byte{socksVersion, 2, authUserPass, authNone}
	}
	if len(user) > 255 {
		return nil, errdefs.New(errdefs.ErrInvalid, "SOCKS5 user name longer than 255 bytes")
	}
	if _, err := c.Write(greet); err != nil {
		return fail(err)
	}
	br := bufio.NewReader(c)
	var sel [2]byte
	if _, err := io.ReadFull(br, sel[:]); err != nil {
		return fail(err)
	}
	switch {
	case sel[0] != socksVersion:
		return fail(fmt.Errorf("server speaks SOCKS version %d", sel[0]))
	case sel[1] == authUserPass && user != "":
		msg := append([]byte{1, byte(len(user))}, user...)
		msg = append(msg, 0)
		if _, err := c.Write(msg); err != nil {
			return fail(err)
		}
		var st [2]byte
		if _, err := io.ReadFull(br, st[:]); err != nil {
			return fail(err)
		}
		if st[1] != 0 {
			return fail(errors.New("user name refused"))
		}
	case sel[1] != authNone:
		return fail(fmt.Errorf("no acceptable method (%#x)", sel[1]))
	}
	req := []byte{socksVersion, cmdConnect, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().Is4() {
		b := a.Unmap().As4()
		req = append(append(req, atypIPv4), b[:]...)
	} else if err == nil {
		req = append(append(req, atypIPv6), a.AsSlice()...)
	} else {
		if len(host) > 255 {
			return nil, errdefs.New(errdefs.ErrInvalid, "host name longer than 255 bytes")
		}
		req = append(append(req, atypDomain, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, port)
	if _, err := c.Write(req); err != nil {
		return fail(err)
	}
	var rep [4]byte
	if _, err := io.ReadFull(br, rep[:]); err != nil {
		return fail(err)
	}
	if rep[1] != RepSucceeded {
		e := &SOCKSError{Code: rep[1], Host: host, Port: port}
		if rep[1] == RepNotAllowed {
			e.underlying = errdefs.ErrRefused
		}
		return nil, e
	}
	var skip int
	switch rep[3] {
	case atypIPv4:
		skip = 4
	case atypIPv6:
		skip = 16
	case atypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return fail(err)
		}
		skip = int(n)
	default:
		return fail(fmt.Errorf("reply address type %d", rep[3]))
	}
	if _, err := io.ReadFull(br, make([]byte, skip+2)); err != nil {
		return fail(err)
	}
	if br.Buffered() > 0 {
		b, _ := br.Peek(br.Buffered())
		return &prefixedConn{Conn: c, pending: append([]byte(nil), b...)}, nil
	}
	return c, nil
}

// prefixedConn is a connection some of whose first bytes were already read.
type prefixedConn struct {
	net.Conn
	pending []byte
}

func (p *prefixedConn) Read(b []byte) (int, error) {
	if len(p.pending) > 0 {
		n := copy(b, p.pending)
		p.pending = p.pending[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// CloseWrite half-closes the underlying TCP connection.
func (p *prefixedConn) CloseWrite() error {
	if cw, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return p.Conn.Close()
}
