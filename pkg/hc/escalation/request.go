package escalation

import (
	"fmt"
	"path"
	"strings"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/trust"
)

// ingest is ReceiveEscalation: a request verified with the generation's
// sandbox key, for this generation, not replayed, bound to a live session
// by a capability the coordinator signed.
func (e *Service) ingest(name string, b []byte) {
	recv := time.Now()
	var req lv1.EscalationRequest
	if err := record.Open(b, record.KindRequest, e.sandbox, &req); err != nil {
		e.refuse(name, err)
		return
	}
	switch {
	case req.DomainId != e.gen.DomainID || req.Generation != e.gen.Generation:
		e.refuse(name, errdefs.New(errdefs.ErrRefused, "request for generation %d of Domain %s: stale or foreign generation", req.Generation, req.DomainId))
		return
	case !trust.ValidID(req.RequestId):
		e.refuse(name, errdefs.New(errdefs.ErrRefused, "bad Escalation Request ID"))
		return
	}
	e.mu.Lock()
	_, replay := e.seen[req.RequestId]
	full := len(e.seen) >= escMaxSeen
	if !replay && !full {
		e.seen[req.RequestId] = struct{}{}
	}
	e.mu.Unlock()
	if replay {
		e.refuse(name, errdefs.New(errdefs.ErrRefused, "replayed Escalation Request ID %s", req.RequestId))
		return
	}
	if full {
		e.refuse(name, errdefs.New(errdefs.ErrRefused, "this generation received %d requests; restart the Domain", escMaxSeen))
		return
	}
	capRec, err := trust.DecodeSigned(req.SessionCapability)
	var claims *trust.CapabilityClaims
	if err == nil {
		claims, err = trust.VerifySessionCapability(capRec, e.coord, "")
	}
	if err != nil {
		e.refuse(name, fmt.Errorf("request %s: %w", req.RequestId, err))
		return
	}
	// From here on the requester can be answered: a result directory.
	dir, err := e.results.Mkdir(req.RequestId)
	if err != nil {
		e.refuse(name, err)
		return
	}
	r := &request{recv: recv, req: &req, dir: dir, cancel: make(chan struct{}), ackNote: make(chan struct{}, 1), final: make(chan struct{})}
	r.lastAck.Store(time.Now().UnixNano())
	entry := audit.Entry{Event: audit.EventRequest, Generation: req.Generation, RequestID: req.RequestId, SessionID: claims.SessionID,
		ClientID: claims.ClientID, Profile: e.gen.Profile, Argv: req.Argv, Cwd: req.Cwd, Why: req.Justification}
	if err := e.checkRequest(&req); err != nil {
		e.audit.AppendBuffered(entry) // synced by the result's entry
		e.finishEarly(r, lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, err.Error())
		return
	}
	e.mu.Lock()
	s := e.sessions[claims.SessionID]
	if s == nil && !e.closed && e.liveSession(claims.SessionID) {
		s = &session{id: claims.SessionID, queue: make(chan *request, sessionQueue), gone: make(chan struct{})}
		e.sessions[claims.SessionID] = s
	}
	if s != nil && s.claims == nil {
		s.claims = claims
		e.wg.Add(1)
		go e.worker(s)
	}
	if s != nil {
		e.active[req.RequestId] = r
		r.sess = s
	}
	e.mu.Unlock()
	// Synced by the next synced entry, before any consequence: the
	// execution's (before release), the result's (before delivery) or the
	// prompt's (decide).
	e.audit.AppendBuffered(entry)
	if s == nil {
		e.finishEarly(r, lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "session "+claims.SessionID+" is not attached to this Domain (it ended)")
		return
	}
	e.log.Info("escalation request", "request_id", req.RequestId, "session_id", s.id, "argv0", record.EscapeText(req.Argv[0]))
	select {
	case s.queue <- r:
	default:
		e.forget(r)
		e.finishEarly(r, lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, fmt.Sprintf("session already has %d pending requests", sessionQueue))
	}
}

// liveSession reports whether the session is registered (caller holds e.mu;
// the coordinator takes its own lock).
func (e *Service) liveSession(id string) bool {
	live, _ := e.cfg.Sessions.Session(id)
	return live
}

func (e *Service) checkRequest(req *lv1.EscalationRequest) error {
	if err := record.CheckArgv(req.Argv); err != nil {
		return err
	}
	n := 0
	for _, a := range req.Argv {
		n += len(a)
	}
	switch {
	case n > escMaxArgvBytes:
		return errdefs.New(errdefs.ErrInvalid, "command of %d bytes exceeds %d", n, escMaxArgvBytes)
	case len(req.Justification) > escMaxWhyBytes:
		return errdefs.New(errdefs.ErrInvalid, "justification of %d bytes exceeds %d", len(req.Justification), escMaxWhyBytes)
	case req.Cwd != "" && (path.IsAbs(req.Cwd) || path.Clean(req.Cwd) != req.Cwd || req.Cwd == ".." || strings.HasPrefix(req.Cwd, "../") || strings.IndexByte(req.Cwd, 0) >= 0):
		return errdefs.New(errdefs.ErrInvalid, "working directory %q is not a clean path inside the workspace", req.Cwd)
	}
	return nil
}

func (e *Service) forget(r *request) {
	e.mu.Lock()
	delete(e.active, r.id())
	e.mu.Unlock()
}

// finishEarly answers a request that never reached a session worker.
func (e *Service) finishEarly(r *request, outcome lv1.EscalationOutcome, reason string) {
	e.writeResult(r, &lv1.EscalationResult{Outcome: outcome, ExitCode: -1, Reason: reason}, 0, nil)
	e.wg.Add(1)
	go e.cleanup(r)
}

// writeResult publishes the one terminal result (DeliverResult), after its
// audit entry is appended and fsynced.
func (e *Service) writeResult(r *request, res *lv1.EscalationResult, bytes uint64, approved []string) {
	res.RequestId, res.Generation = r.id(), e.gen.Generation
	e.mtDeliver(r)
	entry := audit.Entry{Event: audit.EventResult, Generation: e.gen.Generation, RequestID: r.id(), Outcome: outcomeName(res.Outcome),
		Signal: int(res.Signal), Bytes: bytes, Reason: res.Reason, Argv: approved}
	if r.sess != nil {
		entry.SessionID = r.sess.id
	}
	if res.Outcome == lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED {
		code := int(res.ExitCode)
		entry.ExitCode = &code
	}
	if err := e.audit.Append(entry); err != nil {
		e.log.Error("audit escalation result", "request_id", r.id(), "err", err)
	}
	b, err := record.Seal(record.KindResult, res, e.anchor.SignAsCoordinator)
	if err == nil {
		err = r.dir.Publish(escalate.ResultName, b)
	}
	if err != nil {
		e.log.Error("publish escalation result", "request_id", r.id(), "err", err)
	}
	e.log.Info("escalation result", "request_id", r.id(), "outcome", outcomeName(res.Outcome), "exit_code", res.ExitCode, "signal", res.Signal, "reason", res.Reason,
		"received_unix_ns", r.recv.UnixNano(), "since_received_us", time.Since(r.recv).Microseconds())
}

// cleanup removes the request's result files once the client acknowledged
// the result (or after escFinalAckWait, or at teardown).
func (e *Service) cleanup(r *request) {
	defer e.wg.Done()
	select {
	case <-r.final:
	case <-time.After(escFinalAckWait):
	case <-e.stop:
	}
	e.forget(r)
	r.dir.Close()
	e.results.RemoveAll(r.id())
}

func outcomeName(o lv1.EscalationOutcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "ESCALATION_OUTCOME_"))
}

// worker handles the session's requests one at a time.
func (e *Service) worker(s *session) {
	defer e.wg.Done()
	for {
		select {
		case r := <-s.queue:
			e.handle(s, r)
		case <-s.gone:
			for {
				select {
				case r := <-s.queue:
					e.writeResult(r, &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, ExitCode: -1, Reason: "the session ended"}, 0, nil)
					e.wg.Add(1)
					go e.cleanup(r)
				default:
					return
				}
			}
		}
	}
}

// handle decides, executes and answers one request.
func (e *Service) handle(s *session, r *request) {
	defer func() {
		e.wg.Add(1)
		go e.cleanup(r)
	}()
	fail := func(o lv1.EscalationOutcome, reason string) {
		e.writeResult(r, &lv1.EscalationResult{Outcome: o, ExitCode: -1, Reason: reason}, 0, nil)
	}
	e.mtReceive(s, r)
	argv, by, ok := e.decide(s, r)
	e.mtDecided(r, argv, by, ok)
	if !ok {
		switch by {
		case "timeout":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT, "no decision in time")
		case "cancel":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
		case "closed":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "the session closed before the host command started")
		case "ack-timeout":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT, "the requester stopped acknowledging")
		case "session":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
		case "no-terminal":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED, "the session has no terminal to ask the developer and no auto_approve rule matches")
		case "bad-decision":
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the developer decision was not valid")
		default:
			fail(lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED, "denied by the developer")
		}
		return
	}
	e.execute(s, r, argv, by)
}

// matchRule returns the auto-approve rule approving argv run in cwd (never
