package sessionterm

import (
	"errors"
	"os"
	"sync"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
)

// outputGate admits PTY output while the session's route is the sandbox
// route. The pump waits on it before every read of the master (so another
// route stops reading and the kernel PTY buffer pushes back on the guest)
// and forwards what it read only while it holds the gate open (so at most
// one read is held, and none is forwarded once the gate has closed).
type outputGate struct {
	// fwd is held while a read is forwarded; closing the gate takes it, so
	// when set(false) returns no output frame is being written and none
	// will be until the gate opens again.
	fwd  sync.Mutex
	mu   sync.Mutex
	open bool
	wake chan struct{} // closed and replaced on every change
	// closings counts the gate's closings. Each one is followed by a read
	// deadline in the past, which wakes a pump blocked in a read; a pump
	// that finds the count changed across its read knows a deadline error
	// came from a route change (even if the route is back already), not
	// from the drain deadline.
	closings uint64
	// drainAt is the drain deadline once the session closes (zero before):
	// returning to the sandbox route restores it instead of clearing it.
	drainAt time.Time
}

func newOutputGate() *outputGate { return &outputGate{wake: make(chan struct{})} }

func (g *outputGate) set(open bool) {
	if !open {
		g.fwd.Lock()
		defer g.fwd.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != open {
		g.open = open
		if !open {
			g.closings++
		}
		close(g.wake)
		g.wake = make(chan struct{})
	}
}

func (g *outputGate) isOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// closed is the number of closings so far.
func (g *outputGate) closed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closings
}

// setDrain records the drain deadline.
func (g *outputGate) setDrain(at time.Time) {
	g.mu.Lock()
	g.drainAt = at
	g.mu.Unlock()
}

// drainDeadline is the drain deadline, zero before the session closes.
func (g *outputGate) drainDeadline() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.drainAt
}

// forward runs write while holding the gate open; it waits for the gate
// and reports false if quit closed first.
func (g *outputGate) forward(quit <-chan struct{}, write func() error) (bool, error) {
	for g.wait(quit) {
		g.fwd.Lock()
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		if open {
			err := write()
			g.fwd.Unlock()
			return true, err
		}
		g.fwd.Unlock()
	}
	return false, nil
}

// wait blocks until the gate is open (true) or quit closes (false).
func (g *outputGate) wait(quit <-chan struct{}) bool {
	for {
		g.mu.Lock()
		open, wake := g.open, g.wake
		g.mu.Unlock()
		if open {
			return true
		}
		select {
		case <-wake:
		case <-quit:
			return false
		}
	}
}

// SetRoute changes the modeled terminal route and the output gate with it.
// Leaving the sandbox route also wakes a pump waiting in a read of the
// master (a read deadline in the past): it goes back to waiting for the
// gate, so the master is not read at all until the route is the sandbox
// route again; only a read already copying bytes completes (and is held).
// Back on the sandbox route the read deadline is none, or the drain
// deadline once the session closes.
func (t *Terminal) SetRoute(r Route) {
	t.route = r
	if t.gate == nil {
		return
	}
	if r == RouteSandbox {
		t.master.SetReadDeadline(t.gate.drainDeadline())
		t.gate.set(true)
		return
	}
	t.gate.set(false)
	t.master.SetReadDeadline(time.Unix(1, 0))
}

// pumpOutput forwards PTY output to the client until the master reports
// EOF, the drain deadline passes, the connection fails or quit closes. It
// is the only writer of Output frames; each read (aggregated up to
// termFrameMax) goes out as one frame straight from the read buffer, so a
// client that does not read blocks the pump, the pump stops reading the
// master and the kernel PTY buffer pushes back on the guest. No user-space
// queue holds terminal output.
func (t *Terminal) pumpOutput(quit <-chan struct{}) {
	buf := make([]byte, control.OutputHeadroom+termFrameMax)
	for {
		// Counted before waiting: a closing after this point changes the
		// count, whether or not the route is open again by the time the
		// read returns.
		closings := t.gate.closed()
		if !t.gate.wait(quit) {
			return
		}
		n, err := t.master.Read(buf[control.OutputHeadroom:])
		if n > 0 {
			ok, werr := t.gate.forward(quit, func() error {
				return t.s.Conn.WriteOutput(lv1.Stream_STREAM_TERMINAL, buf[:control.OutputHeadroom+n])
			})
			if !ok {
				return
			}
			if werr != nil {
				t.log.Debug("terminal output not delivered", "err", werr)
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && (t.gate.closed() != closings || !t.gate.isOpen()) {
				continue // woken by a route change, not the drain deadline
			}
			return
		}
	}
}

// beginDrain sets the drain deadline: the pump forwards what the terminal
// still holds until EOF or this deadline.
func (t *Terminal) beginDrain() {
	at := t.clock.Now().Add(t.drain)
	if t.gate != nil {
		t.gate.setDrain(at)
	}
	t.master.SetReadDeadline(at)
}
