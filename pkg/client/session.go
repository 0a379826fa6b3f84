package client

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/trust"
)

// SessionOptions is how a session hands its frames to the caller.
type SessionOptions struct {
	// Output writes the session's output (required). It is called on the
	// frame reader's goroutine, in order, with bytes that are valid only
	// during the call (straight from the read buffer: no copy, no decode,
	// no hand-off per frame), so every event after them (Exit, Error)
	// comes after the last output byte was written.
	Output func(stream lv1.Stream, data []byte)
	// Inline, when not nil, is offered every other frame first, on the
	// reader's goroutine, so what it writes keeps its place among the
	// output bytes; it reports whether it handled the frame.
	Inline func(*lv1.ServerFrame) bool
	// HoldOutput makes the reader wait after the Accepted event until
	// OutputReady is called, so no output is written before the caller
	// has set up its terminal.
	HoldOutput bool
}

// Event is one step of a session the caller acts on: a frame (Progress,
// Accepted, an escalation prompt or its end, or one this package does not
// interpret), or, as the last event, End.
type Event struct {
	Frame *lv1.ServerFrame
	End   *End
}

// End is how a session ended: the command's exit status (Stopped: ended
// by `lazaret stop`), Retry when the Domain was stopping before the
// session was accepted (start or join again), or Err: the coordinator
// refused the session, or (Lost) the connection was lost.
type End struct {
	Code    int
	Stopped bool
	Retry   bool
	Err     error
	Lost    bool
}

// Session is one Client Session on an authenticated connection. Its
// methods send the client's frames; they may be called from any
// goroutine.
type Session struct {
	c        *Conn
	req      *lv1.RunRequest
	anchor   *trust.SessionAnchor
	events   chan Event
	accepted atomic.Bool
	ready    chan struct{}
	readyOne sync.Once
	closed   chan struct{}
	closeOne sync.Once
}

// Session prepares a Client Session running req on c; Start registers it.
// anchor is the session's Session Anchor (req carries its registration).
// The session owns c.
func (c *Conn) Session(req *lv1.RunRequest, anchor *trust.SessionAnchor) *Session {
	return &Session{c: c, req: req, anchor: anchor, events: make(chan Event, 16), ready: make(chan struct{}), closed: make(chan struct{})}
}

// Start sends the RunRequest and starts reading the session's frames: its
// events arrive on Events. Call it once.
func (s *Session) Start(opts SessionOptions) {
	if !opts.HoldOutput {
		s.OutputReady()
	}
	if err := CheckRequestSize(s.req); err != nil {
		s.emit(Event{End: &End{Err: err}}) // nothing was sent: no retry helps
		return
	}
	if err := s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Run{Run: s.req}}); err != nil {
		// The coordinator closed between dial and request: it is stopping.
		s.emit(Event{End: &End{Retry: true}})
		return
	}
	go s.read(opts)
}

// registrationHeadroom is what a request's Session Registration (set per
// attempt, after CheckRequestSize's first check) adds at most.
const registrationHeadroom = 16 << 10

// CheckRequestSize refuses a RunRequest whose frame the control protocol
// cannot carry (control.MaxFrame): in practice a command line and
// environment over about a megabyte.
func CheckRequestSize(req *lv1.RunRequest) error {
	n := proto.Size(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Run{Run: req}})
	if req.SessionRegistration == nil {
		n += registrationHeadroom
	}
	if n <= control.MaxFrame {
		return nil
	}
	return errdefs.New(errdefs.ErrInvalid, "this session's command line and environment take %d KiB, more than a session request carries (%d KiB): pass large data in a file in the workspace or on standard input", n>>10, control.MaxFrame>>10)
}

// Events delivers the session's events; End is the last.
func (s *Session) Events() <-chan Event { return s.events }

// Anchor is the session's Session Anchor (it signs the developer's
// escalation decisions).
func (s *Session) Anchor() *trust.SessionAnchor { return s.anchor }

// Accepted reports whether the coordinator accepted the session.
func (s *Session) Accepted() bool { return s.accepted.Load() }

// OutputReady lets a HoldOutput session's reader go on after Accepted.
func (s *Session) OutputReady() { s.readyOne.Do(func() { close(s.ready) }) }

// Close ends the session: the coordinator releases it when the connection
// closes.
func (s *Session) Close() error {
	s.OutputReady()
	s.closeOne.Do(func() { close(s.closed) })
	return s.c.Close()
}

// emit hands an event to the caller unless the session was closed.
func (s *Session) emit(e Event) {
	select {
	case s.events <- e:
	case <-s.closed:
	}
}

func (s *Session) read(opts SessionOptions) {
	// gotFrame: the coordinator answered with a frame the caller saw; a
	// connection closed before that means it was stopping.
	gotFrame := false
	end := func(e *End) { s.emit(Event{End: e}) }
	for {
		b, err := s.c.fc.ReadRaw(control.MaxFrame)
		var f lv1.ServerFrame
		if err == nil {
			if stream, data, ok := control.ParseOutput(b); ok {
				opts.Output(stream, data)
				continue
			}
			if err = proto.Unmarshal(b, &f); err != nil {
				err = fmt.Errorf("decode frame: %w", err)
			}
		}
		if err != nil {
			if !s.Accepted() && !gotFrame {
				end(&End{Retry: true})
			} else {
				end(&End{Lost: true, Err: errdefs.Mark(fmt.Errorf("lost the connection to the Host Coordinator: %v", err), errdefs.ErrUnavailable)})
			}
			return
		}
		switch {
		case f.GetOutput() != nil:
			opts.Output(f.GetOutput().Stream, f.GetOutput().Data)
		case opts.Inline != nil && opts.Inline(&f):
		case f.GetExit() != nil:
			x := f.GetExit()
			end(&End{Code: int(x.GetCode()), Stopped: x.GetStopped()})
			return
		case f.GetError() != nil:
			e := f.GetError()
			if e.Retry && !s.Accepted() {
				end(&End{Retry: true})
			} else {
				end(&End{Err: frameError(e)})
			}
			return
		case f.GetAccepted() != nil:
			gotFrame = true
			s.accepted.Store(true)
			s.emit(Event{Frame: &f})
			<-s.ready
		default:
			gotFrame = true
			s.emit(Event{Frame: &f})
		}
	}
}

// send writes one client frame.
func (s *Session) send(m *lv1.ClientFrame) error { return s.c.fc.Write(m) }

// Forward passes on a signal this CLI received from outside its terminal:
// SIGINT and SIGQUIT become Interrupt and Quit (the coordinator signals
// the session's guest process group); of a non-interactive session any
// other signal is delivered to the exact guest process (SignalRequest).
// It reports false when the session is not accepted yet, or when an
// interactive session's CLI should leave instead (SIGTERM, SIGHUP: the
// coordinator releases the session when the connection closes).
func (s *Session) Forward(sig syscall.Signal) bool {
	if !s.Accepted() {
		return false
	}
	switch sig {
	case syscall.SIGINT:
		s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Interrupt{Interrupt: &lv1.Interrupt{}}})
	case syscall.SIGQUIT:
		s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Quit{Quit: &lv1.Quit{}}})
	default:
		if s.req.Tty {
			return false
		}
		s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Signal{Signal: &lv1.SignalRequest{Signal: int32(sig)}}})
	}
	return true
}

// Stdin sends input: the command's standard input, or an interactive
// session's terminal input. The caller may reuse data afterwards.
func (s *Session) Stdin(data []byte) error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Stdin{Stdin: &lv1.StdinData{Data: data}}})
}

// CloseStdin closes the command's standard input.
func (s *Session) CloseStdin() error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_StdinClose{StdinClose: &lv1.StdinClose{}}})
}

// Resize sends an interactive session's new terminal size.
func (s *Session) Resize(ws *lv1.WindowSize) error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Resize{Resize: &lv1.Resize{Size: ws}}})
}

// Suspend stops a non-interactive session's guest process group (the CLI
// was suspended); Continue resumes it.
func (s *Session) Suspend() error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Suspend{Suspend: &lv1.Suspend{}}})
}

// Continue resumes the group Suspend stopped.
func (s *Session) Continue() error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Continue{Continue: &lv1.Continue{}}})
}

// Decide sends the developer's signed answer to an escalation prompt.
func (s *Session) Decide(d *lv1.SignedDecision) error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_EscalationDecision{EscalationDecision: d}})
}

// CancelHostProcess cancels the session's running host command.
func (s *Session) CancelHostProcess(requestID string) error {
	return s.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: requestID}}})
}
