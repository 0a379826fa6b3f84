package sessionterm

import (
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/pty"
)

// Attached is an interactive terminal whose exec client already runs on
// Master's slave and whose guest group is identified: the state Run
// reaches once the record is Running. Serve runs its event loop over it,
// the seam through which route handlers (Routes) are driven with a real
// PTY and exec client and no sandbox.
type Attached struct {
	Domain  Domain
	Session Session
	Master  *pty.Master
	Child   *proc.Child
	// Drain bounds the drain of PTY output after the exec client exited;
	// zero means DrainTimeout.
	Drain time.Duration
}

// Serve runs the event loop of an attached terminal on the sandbox route
// until the command's Exit was sent (false) or the client went away
// (true). It neither records nor releases the terminal.
func Serve[A, H any](a Attached, frames <-chan *lv1.ClientFrame, routes Routes[A, H]) (clientGone bool) {
	if a.Session.Stopped == nil {
		a.Session.Stopped = func() bool { return false }
	}
	t := &Terminal{d: a.Domain, s: a.Session, log: a.Domain.Log.With("session_id", a.Session.ID, "tty", true), clock: realClock{},
		drain: a.Drain, master: a.Master, child: a.Child, identified: true, gate: newOutputGate()}
	if t.drain == 0 {
		t.drain = DrainTimeout
	}
	t.SetRoute(RouteSandbox)
	return loop(t, frames, true, routes)
}
