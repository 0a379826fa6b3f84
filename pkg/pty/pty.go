// Package pty is the host pseudo-terminal primitive of interactive Client
// Sessions: it allocates a PTY pair, sets and reads its window size, puts a
// terminal in raw mode, and exposes the master as a pollable file whose
// reads honour deadlines (so a close handshake can drain with a bound) and
// whose end of stream — EIO once every slave descriptor is closed — reads as
// io.EOF.
//
// The Host Coordinator owns the master; the slave becomes the stdin, stdout
// and stderr (and controlling terminal) of one non-detached `runsc exec`
// and is closed in the coordinator right after the spawn.
package pty

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/rawio"
)

// Size is a terminal window size. Rows and Cols are non-zero 16-bit values;
// pixel dimensions are 0 when unknown.
type Size struct {
	Rows, Cols, XPixels, YPixels uint32
}

// Validate reports whether s is a usable window size (spec §3.3: rows and
// columns are non-zero unsigned 16-bit values).
func (s Size) Validate() error {
	if s.Rows == 0 || s.Cols == 0 || s.Rows > 0xffff || s.Cols > 0xffff || s.XPixels > 0xffff || s.YPixels > 0xffff {
		return errdefs.New(errdefs.ErrInvalid, "window size %dx%d (%dx%d px): rows and columns must be 1..65535", s.Rows, s.Cols, s.XPixels, s.YPixels)
	}
	return nil
}

func (s Size) winsize() *unix.Winsize {
	return &unix.Winsize{Row: uint16(s.Rows), Col: uint16(s.Cols), Xpixel: uint16(s.XPixels), Ypixel: uint16(s.YPixels)}
}

// Master is the coordinator's end of a PTY pair.
type Master struct {
	f *os.File
}

// Open allocates a PTY pair: the master (non-blocking, close-on-exec,
// driven by the Go poller) and its slave (close-on-exec, not made the
// caller's controlling terminal), with the kernel's default (cooked)
// terminal modes and the given initial size. The slave stays cooked: a
// gVisor guest TTY backed by a host terminal uses the host line discipline
// (its TCSETS reach the slave), so echo, line editing and the signal
// characters are the host kernel's, exactly as on a host terminal. The caller passes the slave to exactly one child and then
// closes its own copy.
func Open(size Size) (*Master, *os.File, error) {
	if err := size.Validate(); err != nil {
		return nil, nil, err
	}
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, errdefs.Mark(&os.PathError{Op: "open", Path: "/dev/ptmx", Err: err}, errdefs.ErrUnsupportedHost)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, nil, os.NewSyscallError("ioctl TIOCSPTLCK", err)
	}
	// TIOCGPTPEER opens the slave through the master itself, so no path
	// lookup in /dev/pts can name another terminal.
	// The ioctl's argument is the open flags: close-on-exec from the start,
	// so no concurrent spawn can inherit the slave.
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(mfd)
		return nil, nil, os.NewSyscallError("ioctl TIOCGPTPEER", errno)
	}
	sfd := int(r)
	m := &Master{f: os.NewFile(uintptr(mfd), "ptmx")}
	slave := os.NewFile(uintptr(sfd), "pts")
	if err := SetSize(slave, size); err != nil {
		m.Close()
		slave.Close()
		return nil, nil, err
	}
	return m, slave, nil
}

// Read reads terminal output: it waits until some is available, then takes
// everything available up to len(b) (the kernel hands out at most a few KiB
// per read(2), so one wake-up yields one large chunk instead of many small
// ones). Once every slave descriptor is closed the kernel reports EIO,
// returned as io.EOF after any bytes already read; a passed read deadline
// returns an error matching os.ErrDeadlineExceeded.
func (m *Master) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	rc, err := m.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	off := 0
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for off < len(b) {
			n, err := rawio.ReadRaw(int(fd), b[off:])
			if n > 0 {
				off += n
				continue
			}
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				// Nothing yet: wait for readiness. The reads are raw
				// system calls (package rawio): a busy session makes
				// thousands a second, and ordinary ones would keep the
				// runtime's monitor thread polling.
				return off > 0
			case err != nil:
				rerr = err
			default: // n == 0
				rerr = io.EOF
			}
			return true
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if off > 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		// Deliver the bytes now; the next Read reports the end again.
		return off, nil
	}
	if err != nil && (errors.Is(err, unix.EIO) || err == io.EOF) {
		err = io.EOF
	}
	return off, err
}

// Write writes terminal input. It blocks (in the poller) while the PTY's
// input buffer is full: that is the backpressure a non-reading guest exerts.
func (m *Master) Write(b []byte) (int, error) { return m.f.Write(b) }

// SetReadDeadline bounds pending and future reads.
func (m *Master) SetReadDeadline(t time.Time) error { return m.f.SetReadDeadline(t) }

// SetWriteDeadline bounds pending and future writes.
func (m *Master) SetWriteDeadline(t time.Time) error { return m.f.SetWriteDeadline(t) }

// Resize applies TIOCSWINSZ to the master. The kernel then signals SIGWINCH
// to the slave's foreground process group (the exec client, if the slave is
// its controlling terminal).
func (m *Master) Resize(s Size) error {
	if err := s.Validate(); err != nil {
		return err
	}
	return SetSize(m.f, s)
}

// Size returns the PTY's current window size.
func (m *Master) Size() (Size, error) { return GetSize(m.f) }

// Index is the PTY's number (the slave is /dev/pts/<Index>).
func (m *Master) Index() (int, error) {
	n := 0
	err := control(m.f, func(fd int) error {
		var err error
		n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN)
		return err
	})
	return n, err
}

// Buffered is the number of output bytes waiting in the kernel to be read
// from the master (TIOCINQ): where terminal output stays while the reader
// applies backpressure.
func (m *Master) Buffered() (int, error) {
	n := 0
	err := control(m.f, func(fd int) error {
		var err error
		if n, err = unix.IoctlGetInt(fd, unix.TIOCINQ); err != nil {
			return os.NewSyscallError("ioctl TIOCINQ", err)
		}
		return nil
	})
	return n, err
}

// Close closes the master; a pending Read returns an error.
func (m *Master) Close() error { return m.f.Close() }

// control runs f on the raw descriptor of an *os.File.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// SetSize applies TIOCSWINSZ to a terminal descriptor.
func SetSize(f *os.File, s Size) error {
	return control(f, func(fd int) error {
		if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, s.winsize()); err != nil {
			return os.NewSyscallError("ioctl TIOCSWINSZ", err)
		}
		return nil
	})
}

// GetSize reads TIOCGWINSZ of a terminal descriptor.
func GetSize(f *os.File) (Size, error) {
	var s Size
	err := control(f, func(fd int) error {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil {
			return os.NewSyscallError("ioctl TIOCGWINSZ", err)
		}
		s = Size{Rows: uint32(ws.Row), Cols: uint32(ws.Col), XPixels: uint32(ws.Xpixel), YPixels: uint32(ws.Ypixel)}
		return nil
	})
	return s, err
}

// MakeRaw puts a terminal in raw mode (cfmakeraw): no echo, no line
// editing, no signal characters, no output processing.
func MakeRaw(f *os.File) error {
	return control(f, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return os.NewSyscallError("ioctl TCGETS", err)
		}
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		t.Oflag &^= unix.OPOST
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cflag &^= unix.CSIZE | unix.PARENB
		t.Cflag |= unix.CS8
		t.Cc[unix.VMIN] = 1
		t.Cc[unix.VTIME] = 0
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
			return os.NewSyscallError("ioctl TCSETS", err)
		}
		return nil
	})
}

// String describes s for logs.
func (s Size) String() string { return fmt.Sprintf("%dx%d", s.Cols, s.Rows) }
