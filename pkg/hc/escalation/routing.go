package escalation

import (
	"log/slog"
	"sync"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// Route is a session terminal's route as the escalation role sets it (the
// model's terminal route): the sandbox's, an escalation prompt's, or a host
// process's.
type Route int

// The routes the role switches between.
const (
	RouteSandbox Route = iota + 1
	RoutePrompt
	RouteHostProcess
)

// Terminal is what Routing needs from an interactive session's terminal
// loop: its route (a route other than the sandbox's closes the output gate,
// so the PTY is no longer read), its client connection and its logger.
type Terminal interface {
	// SetRoute switches the session's terminal route.
	SetRoute(Route)
	// RouteName names the current route (for logs).
	RouteName() string
	// Send writes one frame to the session's client; a lost client is
	// the loop's to notice (its frame reader ends), so Routing ignores
	// the error.
	Send(*lv1.ServerFrame) error
	// Log is the session terminal's logger.
	Log() *slog.Logger
}

// Port connects a session's escalation worker to its terminal loop.
type Port struct {
	asks chan *PromptAsk
	// hosts carries StartHostExecution: the loop switches the session's
	// route to HostProcess and closes the run's routed channel before the
	// worker releases the process.
	hosts chan *HostRun
	// closed is closed by the loop when its session starts closing (the
	// close handshake), its client is lost or its PTY is: from then on no
	// prompt is shown and no host process starts for the session.
	closed    chan struct{}
	closeOnce sync.Once
}

func newPort() *Port {
	return &Port{asks: make(chan *PromptAsk), hosts: make(chan *HostRun), closed: make(chan struct{})}
}

func (p *Port) close() { p.closeOnce.Do(func() { close(p.closed) }) }

// Closed is closed once the session's terminal loop began closing it (or
// lost its client or PTY).
func (p *Port) Closed() <-chan struct{} { return p.closed }

// HostRun is one host execution of an interactive session (the model's
// HostProcess route): the terminal loop holds the route from
// StartHostExecution until the exact process is gone. The loop closes
// routed once the route is HostProcess (the worker releases the process
// only then) and may ask for the process to be stopped; the worker
// reports when it is gone.
type HostRun struct {
	started *lv1.HostProcessStarted
	routed  chan struct{}

	// stop is closed by the loop (developer cancellation, session close);
	// stopWhy is set before.
	stop     chan struct{}
	stopWhy  string
	stopOnce sync.Once

	// ended is closed by the worker once the exact process has exited, or
	// was killed, reaped, audited and answered, or never started; end is
	// set before.
	ended   chan struct{}
	end     *lv1.HostProcessEnded
	endOnce sync.Once
}

func newHostRun(started *lv1.HostProcessStarted) *HostRun {
	return &HostRun{started: started, routed: make(chan struct{}), stop: make(chan struct{}), ended: make(chan struct{})}
}

// requestStop asks the worker to kill the process (CancelRequest); the
// first reason wins.
func (h *HostRun) requestStop(why string) {
	h.stopOnce.Do(func() {
		h.stopWhy = why
		close(h.stop)
	})
}

// stopC is the stop channel (nil without a run: a session with no terminal).
func (h *HostRun) stopC() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.stop
}

// finish reports that the process is gone (CompleteHostExecution,
// CancelRequest, TimeoutRequest or FailHostExecution restore the sandbox
// route); only the first report counts.
func (h *HostRun) finish(outcome lv1.EscalationOutcome, code, sig int32, reason string) {
	if h == nil {
		return
	}
	h.endOnce.Do(func() {
		h.end = &lv1.HostProcessEnded{RequestId: h.started.RequestId, Outcome: outcome, ExitCode: code, Signal: sig, Reason: reason}
		close(h.ended)
	})
}

// PromptAsk is one prompt: the terminal loop shows it (route Prompt) and
// returns the CLI's signed answer; done is closed when the ask ends.
type PromptAsk struct {
	prompt *lv1.EscalationPrompt
	answer chan *lv1.SignedDecision
	done   chan struct{}
	reason string // why it ended without an answer
	// cancelled is closed by the terminal when its session closes while
	// the prompt is shown.
	cancelled  chan struct{}
	cancelOnce sync.Once
}

// Routing is an interactive session's side of escalation routing
// (the model's BeginPrompt, StartHostExecution … CompleteHostExecution and
// TerminalIsolation):
//
//   - while a prompt is shown the route is Prompt: the PTY is not read and
//     nothing the developer types reaches the sandbox; the CLI renders the
//     prompt and answers with a DeveloperDecision signed by the session's
//     Session Anchor;
//   - while an approved (or auto-approved) host command runs the route is
//     HostProcess: the PTY is not read (the kernel PTY buffer holds the
//     guest's output and pushes back), input, resize and signal events are
//     refused, the CLI shows the command's status, and only the developer's
//     HostProcessCancel is taken; the route returns to the sandbox once the
//     exact process is gone.
//
// Closing the session (its command exited, its client or its PTY was lost)
// first ends both: no prompt or host process starts afterwards, the shown
// prompt is cancelled, and a running host process is killed through its
// pidfd, reaped, audited as cancelled and answered before any terminal
// output is drained. Other sessions' loops are unaffected.
type Routing struct {
	svc    *Service
	port   *Port
	cur    *PromptAsk // the prompt shown (route Prompt)
	run    *HostRun   // the host process running (route HostProcess)
	closed bool       // the close handshake began: nothing new is routed
}

// Routing registers an interactive session's prompt port and returns the
// terminal loop's side of escalation routing. A session whose events are
// not admitted (it ended before it was identified) gets no port, so its
// requests are treated as having no terminal.
func (e *Service) Routing(sessionID string, admitted bool) *Routing {
	p := &Routing{svc: e}
	if admitted {
		p.port = e.attachTerminal(sessionID)
	}
	return p
}

// RouteChannels are what the loop selects on for escalation routing.
type RouteChannels struct {
	Ask      <-chan *PromptAsk // a new prompt (route Sandbox only)
	AskDone  <-chan struct{}   // the shown prompt ended without an answer
	Host     <-chan *HostRun   // StartHostExecution (route Sandbox only)
	HostDone <-chan struct{}   // the running host process is gone
}

// Channels returns the channels the loop selects on: a new prompt or host
// execution only on the sandbox route of a session that is not closing, the
// current one's end otherwise.
func (p *Routing) Channels(sandbox, closing bool) RouteChannels {
	switch {
	case p.cur != nil:
		return RouteChannels{AskDone: p.cur.done}
	case p.run != nil:
		return RouteChannels{HostDone: p.run.ended}
	case p.port == nil || p.closed || closing || !sandbox:
		return RouteChannels{}
	}
	return RouteChannels{Ask: p.port.asks, Host: p.port.hosts}
}

// Begin switches the route to Prompt (the output gate closes, so the pump
// stops reading the PTY) and sends the prompt.
func (p *Routing) Begin(t Terminal, a *PromptAsk) {
	p.cur = a
	p.svc.mtBeginPrompt(a.prompt.RequestId)
	t.SetRoute(RoutePrompt)
	t.Log().Info("escalation prompt shown", "request_id", a.prompt.RequestId)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPrompt{EscalationPrompt: a.prompt}})
}

// End closes a prompt that ended without an answer (timeout, cancellation).
func (p *Routing) End(t Terminal) {
	a := p.cur
	p.cur = nil
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: a.prompt.RequestId, Reason: a.reason}}})
	t.SetRoute(RouteSandbox)
}

// Cancel ends the shown prompt because the session is closing (its
// command exited): the worker refuses whatever decision would follow and
// audits the request as cancelled, and the CLI is told the prompt ended. A
// decision can never start a host command for a closing session.
func (p *Routing) Cancel(t Terminal, reason string) {
	a := p.cur
	if a == nil {
		return
	}
	p.cur = nil
	a.reason = reason
	a.cancelOnce.Do(func() { close(a.cancelled) })
	t.Log().Info("escalation prompt cancelled", "request_id", a.prompt.RequestId, "reason", reason)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: a.prompt.RequestId, Reason: reason}}})
	t.SetRoute(RouteSandbox)
}

// Answer takes a decision frame: it goes to the current ask's worker (which
// verifies the signature) and the route returns to the sandbox. It reports
// whether f was a decision frame. While the session closes no decision is
// taken.
func (p *Routing) Answer(t Terminal, f *lv1.ClientFrame, closing bool) bool {
	d := f.GetEscalationDecision()
	if d == nil {
		return false
	}
	if p.cur == nil || closing {
		t.Log().Warn("escalation decision without a prompt refused", "closing", closing)
		return true
	}
	select {
	case p.cur.answer <- d:
	default:
	}
	p.cur = nil
	t.SetRoute(RouteSandbox)
	return true
}

// StartHost is StartHostExecution's route change: the output gate closes
// (no output frame is in flight once it returns), the CLI is told, and only
// then may the worker release the process.
func (p *Routing) StartHost(t Terminal, h *HostRun) {
	p.run = h
	t.SetRoute(RouteHostProcess)
	t.Log().Info("host process route", "request_id", h.started.RequestId, "decided_by", h.started.DecidedBy)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_HostProcessStarted{HostProcessStarted: h.started}})
	close(h.routed)
}

// EndHost restores the sandbox route once the exact host process is gone:
// the CLI is told first, then the held PTY output follows.
func (p *Routing) EndHost(t Terminal) {
	h := p.run
	p.run = nil
	t.Log().Info("host process route ended", "request_id", h.end.RequestId, "outcome", outcomeName(h.end.Outcome), "exit_code", h.end.ExitCode, "signal", h.end.Signal)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_HostProcessEnded{HostProcessEnded: h.end}})
	t.SetRoute(RouteSandbox)
}

// CancelHost takes the developer's HostProcessCancel (the model's
// CancelRequest): admitted only while the route is HostProcess for that
// request. It reports whether f was such a frame.
func (p *Routing) CancelHost(t Terminal, f *lv1.ClientFrame, closing bool) bool {
	c := f.GetHostProcessCancel()
	if c == nil {
		return false
	}
	if p.run == nil || closing || c.RequestId != p.run.started.RequestId {
		t.Log().Warn("host process cancellation refused", "request_id", c.RequestId, "closing", closing, "route", t.RouteName())
		return true
	}
	t.Log().Info("host process cancelled by the developer", "request_id", c.RequestId)
	p.run.requestStop("cancelled by the developer at the session's terminal")
	return true
}

// Close is the first step of the close handshake (and of the release after
// a lost client or PTY): no prompt is shown and no host process starts from
// now on; the shown prompt is cancelled; a running host process is killed
// through its pidfd and, before this returns, reaped, audited as cancelled
// and answered to its requester. Only then may terminal output be drained.
func (p *Routing) Close(t Terminal) {
	if p.closed {
		return
	}
	p.closed = true
	if p.port != nil {
		p.port.close()
	}
	p.Cancel(t, "the session closed while the prompt was shown")
	if h := p.run; h != nil {
		h.requestStop("the session closed while the host command ran")
		<-h.ended
		p.EndHost(t)
	}
}
