// Package rawio is the non-blocking I/O primitive of the terminal relay:
// reads and writes on descriptors driven by the Go poller, entered as raw
// system calls (they never wait in the kernel: EAGAIN instead, and the
// goroutine waits in the poller).
//
// Why: a relay that goes idle between bursts (every Go process of the
// terminal path: the coordinator's output pump and the CLI) enters each
// ordinary system call through the runtime's bookkeeping, and the first one
// after an idle moment wakes the runtime's monitor thread, which then polls
// every 20 µs for about a millisecond. On the 64 MiB PTY benchmark that was
// thousands of extra wake-ups and context switches per second in both
// processes, on a 2-core machine where the sandbox needs the CPU. A raw
// non-blocking call cannot block, so skipping the bookkeeping is safe.
//
// The CLI's write to the user's terminal is the one blocking call here
// (TerminalWriter, terminal.go): the kernel's wait inside a blocking
// write is what keeps that end fast, and a wait for room before each
// write keeps it preemptible.
package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read reads once from the descriptor behind rc: it waits in the poller
// (honouring the descriptor's read deadline) until something is available,
// then returns what one read(2) gives. End of stream is io.EOF.
func Read(rc syscall.RawConn, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n := 0
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			k, errno := ReadRaw(int(fd), b)
			switch {
			case errno == unix.EINTR:
				continue
			case errno == unix.EAGAIN:
				return false // nothing yet: wait for readiness
			case errno != nil:
				rerr = os.NewSyscallError("read", errno)
			case k == 0:
				rerr = io.EOF
			default:
				n = k
			}
			return true
		}
	})
	if err == nil {
		err = rerr
	}
	return n, err
}

// Write writes all of b to the descriptor behind rc, waiting in the poller
// (honouring the write deadline) while the descriptor accepts nothing: the
// caller blocks exactly as with a blocking write, but never in the kernel.
func Write(rc syscall.RawConn, b []byte) (int, error) {
	n := 0
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, errno := WriteRaw(int(fd), b[n:])
			switch {
			case k > 0:
				n += k
				continue
			case errno == unix.EINTR:
				continue
			case errno == unix.EAGAIN:
				return false // full: wait for room
			case errno != nil:
				werr = os.NewSyscallError("write", errno)
			default:
				werr = io.ErrShortWrite
			}
			return true
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}

// ReadRaw is read(2) without the runtime's system-call bookkeeping. The
// caller makes sure it cannot hold its thread in the kernel: a
// non-blocking descriptor (Read, pty.Master), or a process that has
// nothing else to run (the benchmark's reference relay).
func ReadRaw(fd int, b []byte) (int, error) {
	r, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// WriteRaw is write(2) without the runtime's system-call bookkeeping. The
// caller makes sure it cannot hold its thread in the kernel: a
// non-blocking descriptor (Write), a wait for room first (TerminalWriter),
// or a process that has nothing else to run (the benchmark's reference
// relay).
func WriteRaw(fd int, b []byte) (int, error) {
	r, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// Conn is a unix stream connection whose Read and Write go through Read
// and Write above; everything else (deadlines, Close, addresses) is the
// wrapped connection's. Errors keep net's shape (*net.OpError; io.EOF at
// end of stream).
type Conn struct {
	*net.UnixConn
	rc syscall.RawConn

	wmu     sync.Mutex // orders direct writes and flushes
	held    bool
	pending []byte // written while held, not yet sent
}

// NewConn wraps c.
func NewConn(c *net.UnixConn) (*Conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &Conn{UnixConn: c, rc: rc}, nil
}

// Read reads once from the connection.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := Read(c.rc, b)
	return n, c.opError("read", err)
}

// Write writes all of b to the connection; between Hold and Flush it only
// appends b to what Flush will send.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.held {
		c.pending = append(c.pending, b...)
		return len(b), nil
	}
	n, err := Write(c.rc, b)
	return n, c.opError("write", err)
}

// Hold makes writes accumulate until Flush, so a message that reaches the
// connection in pieces (the TLS records of one control frame: a 64 KiB
// terminal output frame is four) leaves in one write(2) and wakes the peer
// once instead of once per piece.
func (c *Conn) Hold() {
	c.wmu.Lock()
	c.held = true
	c.wmu.Unlock()
}

// Flush ends the hold and sends what accumulated, in order, before any
// later write.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.held = false
	if len(c.pending) == 0 {
		return nil
	}
	_, err := Write(c.rc, c.pending)
	c.pending = c.pending[:0]
	return c.opError("write", err)
}

func (c *Conn) opError(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if _, ok := err.(*net.OpError); ok {
		return err
	}
	return &net.OpError{Op: op, Net: "unix", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
