package hc

import (
	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
)

// terminalPrompts is an interactive session's side of escalation routing
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
type terminalPrompts struct {
	// beginPrompt records the model's BeginPrompt as a prompt is shown.
	beginPrompt func(requestID string)
	port        *promptPort
	cur         *promptAsk // the prompt shown (route Prompt)
	run         *hostRun   // the host process running (route HostProcess)
	closed      bool       // the close handshake began: nothing new is routed
}

// newTerminalPrompts registers the session's prompt port; a session whose
// events are not admitted (it ended before it was identified) gets none, so
// its requests are treated as having no terminal.
func newTerminalPrompts(c *coordinator, sessionID string, admitted bool) *terminalPrompts {
	p := &terminalPrompts{beginPrompt: c.mtBeginPrompt}
	if admitted {
		p.port = c.esc.attachTerminal(sessionID)
	}
	return p
}

// routeChannels are what the loop selects on for escalation routing.
type routeChannels struct {
	ask      <-chan *promptAsk // a new prompt (route Sandbox only)
	askDone  <-chan struct{}   // the shown prompt ended without an answer
	host     <-chan *hostRun   // StartHostExecution (route Sandbox only)
	hostDone <-chan struct{}   // the running host process is gone
}

// channels returns the channels the loop selects on: a new prompt or host
// execution only on the sandbox route of a session that is not closing, the
// current one's end otherwise.
func (p *terminalPrompts) channels(route sessionterm.Route, closing bool) routeChannels {
	switch {
	case p.cur != nil:
		return routeChannels{askDone: p.cur.done}
	case p.run != nil:
		return routeChannels{hostDone: p.run.ended}
	case p.port == nil || p.closed || closing || route != sessionterm.RouteSandbox:
		return routeChannels{}
	}
	return routeChannels{ask: p.port.asks, host: p.port.hosts}
}

// begin switches the route to Prompt (the output gate closes, so the pump
// stops reading the PTY) and sends the prompt.
func (p *terminalPrompts) begin(t *sessionterm.Terminal, a *promptAsk) {
	p.cur = a
	p.beginPrompt(a.prompt.RequestId)
	t.SetRoute(sessionterm.RoutePrompt)
	t.Log().Info("escalation prompt shown", "request_id", a.prompt.RequestId)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPrompt{EscalationPrompt: a.prompt}})
}

// end closes a prompt that ended without an answer (timeout, cancellation).
func (p *terminalPrompts) end(t *sessionterm.Terminal) {
	a := p.cur
	p.cur = nil
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: a.prompt.RequestId, Reason: a.reason}}})
	t.SetRoute(sessionterm.RouteSandbox)
}

// cancel ends the shown prompt because the session is closing (its
// command exited): the worker refuses whatever decision would follow and
// audits the request as cancelled, and the CLI is told the prompt ended. A
// decision can never start a host command for a closing session.
func (p *terminalPrompts) cancel(t *sessionterm.Terminal, reason string) {
	a := p.cur
	if a == nil {
		return
	}
	p.cur = nil
	a.reason = reason
	a.cancelOnce.Do(func() { close(a.cancelled) })
	t.Log().Info("escalation prompt cancelled", "request_id", a.prompt.RequestId, "reason", reason)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: a.prompt.RequestId, Reason: reason}}})
	t.SetRoute(sessionterm.RouteSandbox)
}

// answer takes a decision frame: it goes to the current ask's worker (which
// verifies the signature) and the route returns to the sandbox. It reports
// whether f was a decision frame. While the session closes no decision is
// taken.
func (p *terminalPrompts) answer(t *sessionterm.Terminal, f *lv1.ClientFrame, closing bool) bool {
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
	t.SetRoute(sessionterm.RouteSandbox)
	return true
}

// startHost is StartHostExecution's route change: the output gate closes
// (no output frame is in flight once it returns), the CLI is told, and only
// then may the worker release the process.
func (p *terminalPrompts) startHost(t *sessionterm.Terminal, h *hostRun) {
	p.run = h
	t.SetRoute(sessionterm.RouteHostProcess)
	t.Log().Info("host process route", "request_id", h.started.RequestId, "decided_by", h.started.DecidedBy)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_HostProcessStarted{HostProcessStarted: h.started}})
	close(h.routed)
}

// endHost restores the sandbox route once the exact host process is gone:
// the CLI is told first, then the held PTY output follows.
func (p *terminalPrompts) endHost(t *sessionterm.Terminal) {
	h := p.run
	p.run = nil
	t.Log().Info("host process route ended", "request_id", h.end.RequestId, "outcome", outcomeName(h.end.Outcome), "exit_code", h.end.ExitCode, "signal", h.end.Signal)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_HostProcessEnded{HostProcessEnded: h.end}})
	t.SetRoute(sessionterm.RouteSandbox)
}

// cancelHost takes the developer's HostProcessCancel (the model's
// CancelRequest): admitted only while the route is HostProcess for that
// request. It reports whether f was such a frame.
func (p *terminalPrompts) cancelHost(t *sessionterm.Terminal, f *lv1.ClientFrame, closing bool) bool {
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

// close is the first step of the close handshake (and of the release after
// a lost client or PTY): no prompt is shown and no host process starts from
// now on; the shown prompt is cancelled; a running host process is killed
// through its pidfd and, before this returns, reaped, audited as cancelled
// and answered to its requester. Only then may terminal output be drained.
func (p *terminalPrompts) close(t *sessionterm.Terminal) {
	if p.closed {
		return
	}
	p.closed = true
	if p.port != nil {
		p.port.close()
	}
	p.cancel(t, "the session closed while the prompt was shown")
	if h := p.run; h != nil {
		h.requestStop("the session closed while the host command ran")
		<-h.ended
		p.endHost(t)
	}
}
