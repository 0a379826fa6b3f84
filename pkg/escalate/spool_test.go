package escalate

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// blockedWriter blocks every write until released (a terminal nobody
// reads).
type blockedWriter struct {
	mu      sync.Mutex
	buf     *bytes.Buffer
	release chan struct{}
}

func (b *blockedWriter) Write(p []byte) (int, error) {
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// TestSpoolDoesNotBlockOnAStalledTerminal: writes return while the
// terminal is not read, Drain delivers everything in order across both
// streams once it is.
func TestSpoolDoesNotBlockOnAStalledTerminal(t *testing.T) {
	var all bytes.Buffer
	term := &blockedWriter{buf: &all, release: make(chan struct{})}
	sp := newSpool()
	out, errw := sp.writer(term), sp.writer(term)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 1000; i++ {
			out.Write(bytes.Repeat([]byte{'o'}, 4096))
		}
		errw.Write([]byte("E"))
		out.Write([]byte("end"))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writes blocked on a terminal nobody reads")
	}
	close(term.release)
	sp.Drain()
	got := all.String()
	if len(got) != 1000*4096+4 || got[len(got)-4:] != "Eend" {
		t.Fatalf("drained %d bytes ending %q", len(got), got[len(got)-4:])
	}
}
