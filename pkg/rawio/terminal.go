package rawio

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TerminalWriter writes to a blocking terminal descriptor (the CLI's
// stdout) without the runtime's system-call bookkeeping, yet never holds
// its thread in the kernel beyond the runtime's next preemption signal.
//
// Why: a blocking write to the user's terminal through os.File enters the
// runtime's bookkeeping, and after an idle moment that wakes the runtime's
// monitor thread, which then polls every 20 µs while the write waits for
// the terminal to take the bytes (see the package documentation). A
// non-blocking write with a wait for room in between costs two more
// transitions into the kernel per wake-up; the blocking write's wait
// inside the kernel is what keeps the relay fast.
//
// How it stays safe: each write is preceded by a wait for room in
// ppoll(2), and ppoll is never restarted after a signal. A write that
// starts with room writes at least one byte, and a tty write that has
// written anything returns as soon as a signal is pending. So the
// runtime's preemption signal — sent when garbage collection needs to stop
// the world, or when another goroutine waits for this thread's processor —
// always brings the goroutine back to Go code within one wait for the
// terminal, even if the terminal stops taking output altogether.
type TerminalWriter struct {
	fd int
}

// NewTerminalWriter writes to fd (e.g. 1, the CLI's stdout), which the
// caller keeps open. Its mode is left as it is: not os.File.Fd, which
// would make a non-blocking description blocking for every process that
// shares it; on a non-blocking one, EAGAIN just leads back to the wait.
func NewTerminalWriter(fd int) *TerminalWriter {
	return &TerminalWriter{fd: fd}
}

// Write writes all of b.
func (w *TerminalWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		if !waitWritable(w.fd) {
			// A signal, most likely the runtime's preemption request:
			// yield, so a stop-the-world or a waiting goroutine gets
			// this processor, then wait again.
			runtime.Gosched()
			continue
		}
		k, err := WriteRaw(w.fd, b[n:])
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
		case err != nil:
			return n, os.NewSyscallError("write", err)
		default:
			n += k
		}
	}
	return n, nil
}

// waitWritable waits in ppoll(2), entered raw, until fd has room or an
// error or hang-up to report (the write then returns it); false means a
// signal ended the wait.
func waitWritable(fd int) bool {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
	r, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0)
	if errno == unix.EINTR {
		return false
	}
	return errno != 0 || r == 1
}
