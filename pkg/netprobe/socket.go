package netprobe

// The package's primitive part: its socket calls, made directly so that a
// probe costs the sandbox's network stack its own round trips and nothing
// more (see Run).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// SourceFor is the source address the network stack picks for a UDP
// "connection" to dst. No packet is sent.
func SourceFor(dst netip.Addr) (netip.Addr, error) {
	fd, sa, err := socketTo(netip.AddrPortFrom(dst, 9), unix.SOCK_DGRAM)
	if err != nil {
		return netip.Addr{}, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return netip.Addr{}, os.NewSyscallError("connect", err)
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}, os.NewSyscallError("getsockname", err)
	}
	in4, ok := local.(*unix.SockaddrInet4)
	if !ok {
		return netip.Addr{}, fmt.Errorf("the source toward %s is not an IPv4 address", dst)
	}
	return netip.AddrFrom4(in4.Addr), nil
}

func inet4(ap netip.AddrPort) (*unix.SockaddrInet4, error) {
	if !ap.Addr().Is4() {
		return nil, fmt.Errorf("%s is not an IPv4 address", ap.Addr())
	}
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, nil
}

// socketTo opens a non-blocking IPv4 socket of typ for a probe of ap and
// returns it with ap's address.
func socketTo(ap netip.AddrPort, typ int) (int, *unix.SockaddrInet4, error) {
	sa, err := inet4(ap)
	if err != nil {
		return -1, nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, os.NewSyscallError("socket", err)
	}
	return fd, sa, nil
}

// dnsPort is where the forwarder is asked (a variable for the tests).
var dnsPort uint16 = 53

// errNoAnswer is a probe's bound passing without an answer.
var errNoAnswer = errors.New("no answer")

// wait holds the probes begun with connect and query and collects their
// answers in one loop (run).
type wait struct {
	deadline time.Time // the context's; zero for none
	pending  []waiter
}

type waiter interface {
	pollFD() unix.PollFd
	due() time.Time
	ready(revents int16, now time.Time) bool // reports whether the probe is done
	expire(now time.Time)                    // its bound passed
	fail(err error, now time.Time)           // the wait itself failed
}

func newWait(ctx context.Context) *wait {
	w := &wait{}
	if d, ok := ctx.Deadline(); ok {
		w.deadline = d
	}
	return w
}

func (w *wait) bound(start time.Time, d time.Duration) time.Time {
	due := start.Add(d)
	if !w.deadline.IsZero() && w.deadline.Before(due) {
		return w.deadline
	}
	return due
}

// probe is what every probe has: its socket while it waits (-1 once
// done), when it began, its bound and when that passes, and its outcome:
// err and how long it took (ms).
type probe struct {
	fd     int
	events int16
	start  time.Time
	until  time.Time
	bound  time.Duration
	err    error
	ms     int64
}

func (w *wait) begin(bound time.Duration, events int16) probe {
	p := probe{fd: -1, events: events, start: time.Now(), bound: bound}
	p.until = w.bound(p.start, bound)
	return p
}

// done records the outcome and closes the socket.
func (p *probe) done(err error, now time.Time) {
	p.err, p.ms = err, now.Sub(p.start).Milliseconds()
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

func (p *probe) pollFD() unix.PollFd { return unix.PollFd{Fd: int32(p.fd), Events: p.events} }

func (p *probe) due() time.Time { return p.until }

func (p *probe) fail(err error, now time.Time) { p.done(err, now) }

// connectProbe is a TCP connect and how it was answered: err nil for an
// accepted connection, else the connect's error (errNoAnswer when none
// came within its bound); ms is how long the answer took.
type connectProbe struct{ probe }

// connect begins a non-blocking TCP connect to ap, answered within bound.
func (w *wait) connect(ap netip.AddrPort, bound time.Duration) *connectProbe {
	c := &connectProbe{w.begin(bound, unix.POLLOUT)}
	fd, sa, err := socketTo(ap, unix.SOCK_STREAM)
	if err != nil {
		c.err = err
		return c
	}
	switch err := unix.Connect(fd, sa); err {
	case unix.EINPROGRESS:
		c.fd = fd
		w.pending = append(w.pending, c)
	default:
		unix.Close(fd)
		c.done(err, time.Now())
	}
	return c
}

func (c *connectProbe) ready(revents int16, now time.Time) bool {
	v, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	switch {
	case err != nil:
		c.done(os.NewSyscallError("getsockopt", err), now)
	case v != 0:
		c.done(unix.Errno(v), now)
	default:
		c.done(nil, now)
	}
	return true
}

func (c *connectProbe) expire(now time.Time) { c.done(errNoAnswer, now) }

// answer says how the connect was answered: "connected", "refused",
// or what else happened.
func (c *connectProbe) answer() string {
	switch {
	case c.err == nil:
		return "connected"
	case errors.Is(c.err, unix.ECONNREFUSED):
		return "refused"
	case errors.Is(c.err, errNoAnswer):
		return fmt.Sprintf("no answer within %s", c.bound)
	case errors.As(c.err, new(unix.Errno)):
		return "connect: " + c.err.Error()
	}
	return c.err.Error()
}

// dnsProbe is a DNS query and its reply's rcode, or why none came.
type dnsProbe struct {
	probe
	id    uint16
	rcode int
}

// query sends one A query for a random name under lazaret.invalid to
// server:53, answered within bound by a well-formed reply with its ID.
func (w *wait) query(server netip.Addr, bound time.Duration) *dnsProbe {
	q := &dnsProbe{probe: w.begin(bound, unix.POLLIN)}
	if !server.IsValid() {
		q.err = errors.New("no DNS forwarder")
		return q
	}
	fd, sa, err := socketTo(netip.AddrPortFrom(server, dnsPort), unix.SOCK_DGRAM)
	if err != nil {
		q.err = err
		return q
	}
	q.fd = fd
	id, msg := newQuery()
	q.id = id
	if err := unix.Connect(fd, sa); err != nil {
		q.done(os.NewSyscallError("connect", err), time.Now())
		return q
	}
	if _, err := unix.Write(fd, msg); err != nil {
		q.done(os.NewSyscallError("send", err), time.Now())
		return q
	}
	w.pending = append(w.pending, q)
	return q
}

func (q *dnsProbe) ready(revents int16, now time.Time) bool {
	var buf [1500]byte
	for {
		n, err := unix.Read(q.fd, buf[:])
		if err == unix.EAGAIN || err == unix.EINTR {
			return false
		}
		if err != nil {
			q.done(os.NewSyscallError("receive", err), now)
			return true
		}
		if rc, err := ParseReply(buf[:n], q.id); err == nil {
			q.rcode = rc
			q.done(nil, now)
			return true
		}
	}
}

func (q *dnsProbe) expire(now time.Time) {
	q.done(fmt.Errorf("no reply within %s", q.bound), now)
}

// run waits until every begun probe is answered or past its bound.
func (w *wait) run() {
	for len(w.pending) > 0 {
		now := time.Now()
		live := w.pending[:0]
		next := time.Time{}
		for _, p := range w.pending {
			if !now.Before(p.due()) {
				p.expire(now)
				continue
			}
			live = append(live, p)
			if next.IsZero() || p.due().Before(next) {
				next = p.due()
			}
		}
		w.pending = live
		if len(live) == 0 {
			return
		}
		fds := make([]unix.PollFd, len(live))
		for i, p := range live {
			fds[i] = p.pollFD()
		}
		timeout := int(math.Ceil(float64(next.Sub(now)) / float64(time.Millisecond)))
		if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
			for _, p := range live {
				p.fail(os.NewSyscallError("poll", err), time.Now())
			}
			w.pending = nil
			return
		}
		now = time.Now()
		rest := live[:0]
		for i, p := range live {
			if fds[i].Revents == 0 || !p.ready(fds[i].Revents, now) {
				rest = append(rest, p)
			}
		}
		w.pending = rest
	}
}
