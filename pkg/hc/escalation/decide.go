package escalation

import (
	"crypto/ed25519"
	"time"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// a command that requires a shell: config.Rule.Matches checks it).
func (e *Service) matchRule(argv []string, cwd string) *config.Rule {
	for i := range e.rules {
		if e.rules[i].Matches(argv, cwd) {
			return &e.rules[i]
		}
	}
	return nil
}

// decide is AutoApprove, or QueuePrompt/BeginPrompt and the developer's
// signed DeveloperApprove/DeveloperDeny at the session's own terminal.
func (e *Service) decide(s *session, r *request) (argv []string, by string, ok bool) {
	req := r.req
	dec := audit.Entry{Event: audit.EventDecision, Generation: e.gen.Generation, RequestID: r.id(), SessionID: s.id, ClientID: s.claims.ClientID}
	if rule := e.matchRule(req.Argv, req.Cwd); rule != nil {
		dec.Decision, dec.DecidedBy, dec.Rule, dec.RuleSpec, dec.Argv = "approve", "auto-rule", rule.Argv, rule.String(), req.Argv
		e.audit.AppendBuffered(dec) // synced by the execution's entry before release
		return req.Argv, "auto-rule", true
	}
	e.mtQueuePrompt(r)
	e.audit.Sync() // the request is durable before anyone is asked
	port := e.awaitPort(s, r)
	if port == nil {
		select {
		case <-r.cancel:
			dec.Decision, dec.DecidedBy = "deny", "cancel"
			e.audit.Append(dec)
			return nil, "cancel", false
		case <-s.gone:
			dec.Decision, dec.DecidedBy = "deny", "session"
			e.audit.Append(dec)
			return nil, "session", false
		default:
		}
		dec.Decision, dec.DecidedBy = "deny", "no-terminal"
		e.audit.Append(dec)
		return nil, "no-terminal", false
	}
	timeout := escDecisionDefault
	if t := time.Duration(req.DecisionTimeoutSeconds) * time.Second; t > 0 {
		timeout = min(t, escDecisionMax)
	}
	cwd := ocispec.WorkspaceDir
	if req.Cwd != "" {
		cwd += "/" + req.Cwd
	}
	ask := &PromptAsk{
		prompt: &lv1.EscalationPrompt{RequestId: r.id(), Profile: e.gen.Profile, SessionId: s.id, Generation: e.gen.Generation,
			Argv: req.Argv, Cwd: cwd, Justification: req.Justification, TimeoutSeconds: uint32(timeout / time.Second)},
		answer: make(chan *lv1.SignedDecision, 1), done: make(chan struct{}), cancelled: make(chan struct{}),
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := func(reason, by string) ([]string, string, bool) {
		ask.reason = reason
		close(ask.done)
		dec.Decision, dec.DecidedBy, dec.Reason = "deny", by, reason
		e.audit.Append(dec)
		return nil, by, false
	}
	asked := false
	asks, closedC := port.asks, port.closed
	for {
		select {
		case asks <- ask:
			asked, asks = true, nil
		case sd := <-ask.answer:
			close(ask.done)
			d, err := record.VerifyDecision(sd, s.claims.AnchorPublicKey)
			if err == nil && (d.RequestId != r.id() || d.SessionId != s.id || d.Generation != e.gen.Generation) {
				err = errdefs.New(errdefs.ErrRefused, "developer decision is bound to another request")
			}
			if err == nil && d.Decision == lv1.DecisionKind_DECISION_KIND_APPROVE {
				err = record.CheckArgv(d.ApprovedArgv)
			}
			if err != nil {
				e.log.Warn("developer decision refused", "request_id", r.id(), "err", err)
				dec.Decision, dec.DecidedBy, dec.Reason = "deny", "developer", "invalid decision: "+err.Error()
				e.audit.Append(dec)
				return nil, "bad-decision", false
			}
			if d.Decision != lv1.DecisionKind_DECISION_KIND_APPROVE {
				dec.Decision, dec.DecidedBy = "deny", "developer"
				e.audit.Append(dec)
				return nil, "developer", false
			}
			dec.Decision, dec.DecidedBy, dec.Argv = "approve", "developer", d.ApprovedArgv
			if !proto.Equal(&lv1.DeveloperDecision{ApprovedArgv: d.ApprovedArgv}, &lv1.DeveloperDecision{ApprovedArgv: req.Argv}) {
				dec.Reason = "edited by the developer"
			}
			e.audit.Append(dec)
			return d.ApprovedArgv, "developer", true
		case <-deadline.C:
			return end("no decision in time", "timeout")
		case <-r.cancel:
			return end("cancelled by the requester", "cancel")
		case <-ask.cancelled:
			dec.Decision, dec.DecidedBy, dec.Reason = "deny", "cancel", "the session closed while its prompt was shown"
			e.audit.Append(dec)
			return nil, "closed", false
		case <-closedC:
			if asked {
				// The loop cancels the shown prompt (ask.cancelled) or has
				// taken its answer (ask.answer): either follows.
				closedC = nil
				continue
			}
			ask.reason = "the session closed"
			close(ask.done)
			dec.Decision, dec.DecidedBy, dec.Reason = "deny", "cancel", "the session closed before its prompt was shown"
			e.audit.Append(dec)
			return nil, "closed", false
		case <-s.gone:
			return end("the session ended", "session")
		case <-tick.C:
			if !asked {
				continue
			}
			if time.Since(time.Unix(0, r.lastAck.Load())) > escAckTimeout {
				return end("the requester stopped acknowledging", "ack-timeout")
			}
		}
	}
}

// awaitPort returns the session's prompt port. An interactive session
// registers it once its terminal runs (after the guest group is
// identified), so a request of its command's first moments waits for it.
func (e *Service) awaitPort(s *session, r *request) *Port {
	deadline := time.Now().Add(e.cfg.TerminalWait)
	for {
		e.mu.Lock()
		port := s.port
		e.mu.Unlock()
		if port != nil || !e.interactive(s.id) || time.Now().After(deadline) {
			return port
		}
		select {
		case <-s.gone:
			return nil
		case <-r.cancel:
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// interactive reports whether the session has a terminal.
func (e *Service) interactive(id string) bool {
	_, tty := e.cfg.Sessions.Session(id)
	return tty
}

// Ask puts a prompt that is not a host command (a network ask) to the
// developer at the session's terminal, with the escalation prompt's
// routing: it waits up to wait for the session's terminal loop to serve
// the prompt port and bounds the ask by timeout. It returns the decision
// verified with the session's anchor key and bound to the prompt (by
// "developer"), or why there is none: by is "no-terminal", "developer" (an
// invalid decision), "timeout" or "cancel", with a reason for the audit log
// where the decision itself gives none.
func (e *Service) Ask(sessionID string, anchorKey ed25519.PublicKey, prompt *lv1.EscalationPrompt, timeout, wait time.Duration) (d *lv1.DeveloperDecision, by, reason string) {
	if e == nil {
		return nil, "no-terminal", ""
	}
	var port *Port
	for deadline := time.Now().Add(wait); ; {
		if port = e.Port(sessionID); port != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if port == nil {
		return nil, "no-terminal", ""
	}
	ask := &PromptAsk{prompt: prompt, answer: make(chan *lv1.SignedDecision, 1), done: make(chan struct{}), cancelled: make(chan struct{})}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	asks, closedC := port.asks, port.closed
	asked := false
	for {
		select {
		case asks <- ask:
			asked, asks = true, nil
		case sd := <-ask.answer:
			close(ask.done)
			d, err := record.VerifyDecision(sd, anchorKey)
			if err == nil && (d.RequestId != prompt.RequestId || d.SessionId != sessionID || d.Generation != prompt.Generation) {
				err = errdefs.New(errdefs.ErrRefused, "developer decision is bound to another request")
			}
			if err != nil {
				return nil, "developer", "invalid decision: " + err.Error()
			}
			return d, "developer", ""
		case <-deadline.C:
			ask.reason = "no decision in time"
			close(ask.done)
			return nil, "timeout", ""
		case <-ask.cancelled:
			return nil, "cancel", "the session closed while its prompt was shown"
		case <-closedC:
			if asked {
				closedC = nil
				continue
			}
			ask.reason = "the session closed"
			close(ask.done)
			return nil, "cancel", "the session closed before its prompt was shown"
		}
	}
}
