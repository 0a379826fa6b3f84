package escalation

// Model-trace emission of the host escalation protocol (package
// modeltrace): the Escalation Request steps of tla/Lazaret.tla, from
// ReceiveEscalation to DeliverResult, recorded by the session's escalation
// worker (and BeginPrompt by its terminal loop) in the coordinator's
// discipline: each step is recorded while the Model's lock (the
// coordinator's) is held, before its effect reaches another goroutine or
// process (the prompt frame, the host process's release, the route's
// return to the sandbox, the result file). A request's steps are recorded only while its Client Session is
// attached in the model: DisconnectSession and FailDomain, recorded under
// the same lock, end the model's request themselves (Cancelled, Failed),
// so what the worker does for it afterwards is below the model.
//
// The model's request is the one a session's worker handles
// (activeRequest): a request refused before it reached a worker (a bad
// command, an ended session, a full queue) is one the model never
// receives, and it records nothing.
//
// Two paths of the implementation have no action of their own in the
// model and are recorded as the model's nearest behaviour, marked by a
// fact (tla/MAPPING.md):
//   - a request of a session without a terminal that no rule approves is
//     denied at once: QueuePrompt, BeginPrompt, DeveloperDeny with fact
//     refines=deny-without-terminal (no prompt is shown, no decision
//     signed);
//   - an approved command that cannot start before its route changes
//     (working directory or program unusable, terminal unavailable):
//     StartHostExecution, FailHostExecution with fact
//     refines=start-refused-before-route.

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// Model is the coordinator's model-trace seam. Its lock is the one under
// which the coordinator records DisconnectSession and FailDomain, so a
// request's step and its session's end are ordered.
type Model interface {
	sync.Locker
	// SessionKey returns the model-trace key of the live session id
	// (lock held).
	SessionKey(sessionID string) (key string, ok bool)
	// Attached reports whether the session key is attached in the model
	// and the Domain has not failed (lock held).
	Attached(key string) bool
	// Emit records one model action of the Domain's generation.
	Emit(facts map[string]string, action string, args ...string)
}

// modelState is the role's recorded model state, guarded by the Model's
// lock.
type modelState struct {
	requests map[string]*mRequest
}

// mReqPhase is an Escalation Request's model phase as this coordinator
// recorded it.
type mReqPhase int

const (
	mrVerified  mReqPhase = iota + 1
	mrAwaiting            // AwaitingApproval, no prompt shown
	mrPrompting           // AwaitingApproval, its prompt shown
	mrApproved
	mrExecuting
	mrPending // a result pending (CompletionPending … FailurePending)
	mrDelivered
)

// mRequest is one request the model received.
type mRequest struct {
	session string // the Client Session's model-trace key
	phase   mReqPhase
}

var (
	factNoTerminal  = map[string]string{"refines": "deny-without-terminal"}
	factBeforeRoute = map[string]string{"refines": "start-refused-before-route"}
	mrAny           = []mReqPhase(nil)
	mrFromExecuting = []mReqPhase{mrExecuting}
	mrFromAwaiting  = []mReqPhase{mrAwaiting}
	mrFromApproved  = []mReqPhase{mrApproved}
	mrFromVerified  = []mReqPhase{mrVerified}
)

// mtRequestLocked returns the request's record while its steps are
// recorded (the Model's lock held).
func (e *Service) mtRequestLocked(id string) *mRequest {
	rq := e.model.requests[id]
	if rq == nil || !e.cfg.Model.Attached(rq.session) {
		return nil
	}
	return rq
}

// mtRequestStep records actions of request id (each with args after the
// request) when the request's recorded phase is one of from (any when
// from is nil), and moves it to phase to. A from list is given only where
// the implementation reaches the code path in more than one model phase
// (a kill after the process already exited, a prompt the worker already
// ended); everywhere else a step the model does not allow is recorded as
// taken, for the replay to reject.
func (e *Service) mtRequestStep(id string, from []mReqPhase, to mReqPhase, facts map[string]string, actions ...[]string) {
	if !modeltrace.On() || e.cfg.Model == nil {
		return
	}
	mt := e.cfg.Model
	mt.Lock()
	defer mt.Unlock()
	rq := e.mtRequestLocked(id)
	if rq == nil {
		return
	}
	if from != nil {
		ok := false
		for _, p := range from {
			ok = ok || rq.phase == p
		}
		if !ok {
			return
		}
	}
	for _, a := range actions {
		mt.Emit(facts, a[0], append([]string{id}, a[1:]...)...)
	}
	rq.phase = to
}

func act(action string, args ...string) []string { return append([]string{action}, args...) }

// mtReceive records ReceiveEscalation when the session's worker takes the
// request (the model's activeRequest).
func (e *Service) mtReceive(s *session, r *request) {
	if !modeltrace.On() || e.cfg.Model == nil {
		return
	}
	mt := e.cfg.Model
	mt.Lock()
	defer mt.Unlock()
	key, ok := mt.SessionKey(s.id)
	if !ok || !mt.Attached(key) {
		return
	}
	if e.model.requests == nil {
		e.model.requests = map[string]*mRequest{}
	}
	mt.Emit(map[string]string{"session": key}, "ReceiveEscalation", r.id())
	e.model.requests[r.id()] = &mRequest{session: key, phase: mrVerified}
}

// mtQueuePrompt records QueuePrompt: no rule approved the request.
func (e *Service) mtQueuePrompt(r *request) {
	e.mtRequestStep(r.id(), mrFromVerified, mrAwaiting, nil, act("QueuePrompt"))
}

// mtBeginPrompt records BeginPrompt as the terminal loop shows the prompt
// (before the route changes and the prompt frame is sent); a prompt whose
// request the worker already ended is not shown in the model.
func (e *Service) mtBeginPrompt(requestID string) {
	e.mtRequestStep(requestID, mrFromAwaiting, mrPrompting, nil, act("BeginPrompt"))
}

// mtDecided records how decide ended, before anything follows from it.
func (e *Service) mtDecided(r *request, argv []string, by string, ok bool) {
	id := r.id()
	switch {
	case ok && by == "auto-rule":
		e.mtRequestStep(id, mrAny, mrApproved, nil, act("AutoApprove"))
	case ok:
		e.mtRequestStep(id, mrAny, mrApproved, nil, act("DeveloperApprove", mtCommandDigest(id, argv)))
	case by == "developer":
		e.mtRequestStep(id, mrAny, mrPending, nil, act("DeveloperDeny"))
	case by == "no-terminal":
		e.mtRequestStep(id, mrAny, mrPending, factNoTerminal, act("BeginPrompt"), act("DeveloperDeny"))
	case by == "timeout" || by == "ack-timeout":
		e.mtRequestStep(id, mrAny, mrPending, nil, act("TimeoutRequest"))
	case by == "cancel" || by == "closed":
		e.mtRequestStep(id, mrAny, mrPending, nil, act("CancelRequest"))
	}
	// "session": the session left, DisconnectSession cancelled the request.
	// "bad-decision": the model has no step (ApprovalIdentityTupleMatches
	// fails and the request stays undecided); the result's DeliverResult
	// is recorded and rejected by the replay.
}

// mtCommandDigest is the trace's name of the command approved for request
// id (the model's Commands are per request).
func mtCommandDigest(id string, argv []string) string {
	h := sha256.Sum256([]byte(id + "\x00" + strings.Join(argv, "\x00")))
	return hex.EncodeToString(h[:8])
}

// mtHostRouted records StartHostExecution once the route is HostProcess
// (an interactive session's loop switched it) and before the process is
// released, or how hostRoute refused to start it.
func (e *Service) mtHostRouted(r *request, refused *lv1.EscalationResult) {
	switch {
	case refused == nil:
		e.mtRequestStep(r.id(), mrAny, mrExecuting, nil, act("StartHostExecution"))
	case refused.Outcome == lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED:
		e.mtRequestStep(r.id(), mrAny, mrPending, nil, act("CancelRequest"))
	default:
		e.mtHostFailed(r)
	}
}

// mtHostFailed records FailHostExecution: a start that failed after the
// route changed, or (refines=start-refused-before-route) before.
func (e *Service) mtHostFailed(r *request) {
	e.mtRequestStep(r.id(), mrFromApproved, mrPending, factBeforeRoute, act("StartHostExecution"), act("FailHostExecution"))
	e.mtRequestStep(r.id(), mrFromExecuting, mrPending, nil, act("FailHostExecution"))
}

// mtHostStopped records CancelRequest for a process stopped at its launch
// barrier (the developer cancelled, the session is closing).
func (e *Service) mtHostStopped(r *request) {
	e.mtRequestStep(r.id(), mrAny, mrPending, nil, act("CancelRequest"))
}

// mtHostExited records CompleteHostExecution before the route returns to
// the sandbox.
func (e *Service) mtHostExited(r *request) {
	e.mtRequestStep(r.id(), mrAny, mrPending, nil, act("CompleteHostExecution"))
}

// mtHostKilled records why a running process is killed (before the result
// is written and the route returns). A kill after the process exited
// (its output still draining) is no model step: CompleteHostExecution
// was recorded.
func (e *Service) mtHostKilled(r *request, outcome lv1.EscalationOutcome) {
	a := "FailHostExecution"
	switch outcome {
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED:
		a = "CancelRequest"
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT:
		a = "TimeoutRequest"
	}
	e.mtRequestStep(r.id(), mrFromExecuting, mrPending, nil, act(a))
}

// mtDeliver records DeliverResult before the result is published.
func (e *Service) mtDeliver(r *request) {
	e.mtRequestStep(r.id(), mrAny, mrDelivered, nil, act("DeliverResult"))
}
