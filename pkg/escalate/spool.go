package escalate

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// spool decouples the result's output from a terminal. While a host
// command of an interactive session runs, the Host Coordinator does not
// read that session's PTY (the HostProcess route), so a client writing the
// command's output to the terminal would block once the kernel's PTY
// buffer is full, stop acknowledging chunks, and the coordinator would
// stop the command at its acknowledgement timeout. Writes to a spool
// return at once; one goroutine writes them, in order across stdout and
// stderr, to the real files, and Drain waits for it (the route is
// restored when the command ends, so the held output then reaches the
// developer). Beyond maxSpooled bytes waiting, writes block as before.
type spool struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []spooled
	waiting int
	closed  bool
	done    chan struct{}
}

type spooled struct {
	w    io.Writer
	data []byte
}

// maxSpooled bounds the output held in the client's memory.
const maxSpooled = 64 << 20

func newSpool() *spool {
	s := &spool{done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

func (s *spool) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		e := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		e.w.Write(e.data)
		s.mu.Lock()
		s.waiting -= len(e.data)
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// writer is one stream of the spool.
func (s *spool) writer(w io.Writer) io.Writer { return spoolWriter{s, w} }

type spoolWriter struct {
	s *spool
	w io.Writer
}

func (sw spoolWriter) Write(p []byte) (int, error) {
	s := sw.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.waiting+len(p) > maxSpooled && s.waiting > 0 && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return sw.w.Write(p)
	}
	s.queue = append(s.queue, spooled{sw.w, append([]byte(nil), p...)})
	s.waiting += len(p)
	s.cond.Broadcast()
	return len(p), nil
}

// Drain writes everything spooled and stops the spool.
func (s *spool) Drain() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
