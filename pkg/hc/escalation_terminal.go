package hc

import (
	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// terminalPrompts is an interactive session's side of escalation routing
// (the model's BeginPrompt and TerminalIsolation): while a prompt is shown
// the session's route is Prompt, so its PTY is not read and nothing the
// developer types reaches the sandbox; the CLI renders the prompt and
// answers with a DeveloperDecision signed by the session's Session Anchor.
// Other sessions' loops are unaffected.
type terminalPrompts struct {
	port *promptPort
	cur  *promptAsk
}

// prompts registers the session's prompt port; a session whose events are
// not admitted (it ended before it was identified) gets none, so its
// requests are treated as having no terminal.
func (t *terminal) prompts(admitted bool) *terminalPrompts {
	if !admitted {
		return &terminalPrompts{}
	}
	return &terminalPrompts{port: t.s.c.esc.attachTerminal(t.s.id)}
}

// channels returns the channels the loop selects on: a new ask only on the
// sandbox route, the current ask's end while prompting.
func (p *terminalPrompts) channels(route terminalRoute, closing bool) (<-chan *promptAsk, <-chan struct{}) {
	if p.cur != nil {
		return nil, p.cur.done
	}
	if p.port == nil || closing || route != routeSandbox {
		return nil, nil
	}
	return p.port.asks, nil
}

// begin switches the route to Prompt (the output gate closes, so the pump
// stops reading the PTY) and sends the prompt.
func (p *terminalPrompts) begin(t *terminal, a *promptAsk) {
	p.cur = a
	t.setRoute(routePrompt)
	t.log.Info("escalation prompt shown", "request_id", a.prompt.RequestId)
	t.s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPrompt{EscalationPrompt: a.prompt}})
}

// end closes a prompt that ended without an answer (timeout, cancellation).
func (p *terminalPrompts) end(t *terminal) {
	a := p.cur
	p.cur = nil
	t.s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: a.prompt.RequestId, Reason: a.reason}}})
	t.setRoute(routeSandbox)
}

// cancel ends the shown prompt because the session is closing (its
// command exited): the worker refuses whatever decision would follow and
// audits the request as cancelled, and the CLI is told the prompt ended. A
// decision can never start a host command for a closing session.
func (p *terminalPrompts) cancel(t *terminal, reason string) {
	a := p.cur
	if a == nil {
		return
	}
	p.cur = nil
	a.reason = reason
	a.cancelOnce.Do(func() { close(a.cancelled) })
	t.log.Info("escalation prompt cancelled", "request_id", a.prompt.RequestId, "reason", reason)
	t.s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: a.prompt.RequestId, Reason: reason}}})
	t.setRoute(routeSandbox)
}

// answer takes a decision frame: it goes to the current ask's worker (which
// verifies the signature) and the route returns to the sandbox. It reports
// whether f was a decision frame. While the session closes no decision is
// taken.
func (p *terminalPrompts) answer(t *terminal, f *lv1.ClientFrame, closing bool) bool {
	d := f.GetEscalationDecision()
	if d == nil {
		return false
	}
	if p.cur == nil || closing {
		t.log.Warn("escalation decision without a prompt refused", "closing", closing)
		return true
	}
	select {
	case p.cur.answer <- d:
	default:
	}
	p.cur = nil
	t.setRoute(routeSandbox)
	return true
}
