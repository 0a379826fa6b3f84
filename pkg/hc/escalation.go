package hc

// Host escalation (spec §3.7): the Escalation Mailbox watcher,
// per-session decision routing, host execution through the causal broker
// and chunked, acknowledged result delivery. Model actions (tla/MAPPING.md):
// ReceiveEscalation (ingest), AutoApprove / QueuePrompt / BeginPrompt /
// DeveloperApprove / DeveloperDeny (decide), StartHostExecution /
// CompleteHostExecution / FailHostExecution / CancelRequest /
// TimeoutRequest (execute), DeliverResult (finish).

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/mailbox"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Escalation bounds and timeouts.
const (
	escPollBusy        = 2 * time.Millisecond  // mailbox scan interval right after activity (without inotify)
	escPollIdle        = 10 * time.Millisecond // … and when idle
	escRescan          = time.Second           // safety rescan interval with inotify
	escScanBatch       = 512                   // entries handled per scan
	escMaxSeen         = 1 << 16               // request IDs remembered per generation (replay refusal)
	escSessionQueue    = 16                    // queued requests per session
	escDecisionDefault = 5 * time.Minute
	escDecisionMax     = time.Hour
	// escAckTimeout: a request whose client stops acknowledging (it
	// re-acknowledges every escalate.KeepaliveInterval) is cancelled and
	// its host process killed.
	escAckTimeout     = 10 * time.Second
	escFinalAckWait   = 30 * time.Second
	escRefusalAudits  = 20 // refusals audited per second (the rest are counted)
	escMaxArgvBytes   = 32 << 10
	escMaxWhyBytes    = 4 << 10
	escHostPath       = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	escResultDirMode  = 0o755
	escMailboxDirMode = 0o700
)

// errHostStopped reports a host command stopped at its launch barrier
// (its session closed or the developer cancelled it): it never ran.
var errHostStopped = errors.New("host command stopped before it ran")

// escalations is the generation's escalation service.
type escalations struct {
	c          *coordinator
	log        *slog.Logger
	gen        trust.GenerationIdentity
	sandbox    ed25519.PublicKey
	coord      *trust.Credential
	requests   *mailbox.Dir
	results    *mailbox.Dir
	hostReq    string
	hostRes    string
	audit      *audit.Log
	rules      []config.Rule
	workspace  string
	home, user string

	mu       sync.Mutex
	seen     map[string]struct{}
	active   map[string]*escRequest
	sessions map[string]*escSession
	closed   bool

	refusedWindow time.Time
	refusedCount  int
	refusedQuiet  int

	stop chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	// hooks are ordering seams for tests; nil in production.
	hooks struct {
		// beforeHostRoute runs after the decision, before the worker asks
		// the terminal loop for the HostProcess route.
		beforeHostRoute func(requestID string)
		// hostStarted runs once the host process is released.
		hostStarted func(requestID string, child *proc.Child)
	}
}

// escSession is one session's escalation state: its request queue (the
// model's activeRequest is the one its worker handles) and, for an
// interactive session, the prompt port its terminal loop serves.
type escSession struct {
	id     string
	claims *trust.CapabilityClaims
	queue  chan *escRequest
	gone   chan struct{}
	port   *promptPort
	once   sync.Once
}

// promptPort connects a session's escalation worker to its terminal loop.
type promptPort struct {
	asks chan *promptAsk
	// hosts carries StartHostExecution: the loop switches the session's
	// route to HostProcess and closes the run's routed channel before the
	// worker releases the process.
	hosts chan *hostRun
	// closed is closed by the loop when its session starts closing (the
	// close handshake), its client is lost or its PTY is: from then on no
	// prompt is shown and no host process starts for the session.
	closed    chan struct{}
	closeOnce sync.Once
}

func newPromptPort() *promptPort {
	return &promptPort{asks: make(chan *promptAsk), hosts: make(chan *hostRun), closed: make(chan struct{})}
}

func (p *promptPort) close() { p.closeOnce.Do(func() { close(p.closed) }) }

// hostRun is one host execution of an interactive session (the model's
// HostProcess route): the terminal loop holds the route from
// StartHostExecution until the exact process is gone. The loop closes
// routed once the route is HostProcess (the worker releases the process
// only then) and may ask for the process to be stopped; the worker
// reports when it is gone.
type hostRun struct {
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

func newHostRun(started *lv1.HostProcessStarted) *hostRun {
	return &hostRun{started: started, routed: make(chan struct{}), stop: make(chan struct{}), ended: make(chan struct{})}
}

// requestStop asks the worker to kill the process (CancelRequest); the
// first reason wins.
func (h *hostRun) requestStop(why string) {
	h.stopOnce.Do(func() {
		h.stopWhy = why
		close(h.stop)
	})
}

// stopC is the stop channel (nil without a run: a session with no terminal).
func (h *hostRun) stopC() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.stop
}

// finish reports that the process is gone (CompleteHostExecution,
// CancelRequest, TimeoutRequest or FailHostExecution restore the sandbox
// route); only the first report counts.
func (h *hostRun) finish(outcome lv1.EscalationOutcome, code, sig int32, reason string) {
	if h == nil {
		return
	}
	h.endOnce.Do(func() {
		h.end = &lv1.HostProcessEnded{RequestId: h.started.RequestId, Outcome: outcome, ExitCode: code, Signal: sig, Reason: reason}
		close(h.ended)
	})
}

// promptAsk is one prompt: the terminal loop shows it (route Prompt) and
// returns the CLI's signed answer; done is closed when the ask ends.
type promptAsk struct {
	prompt *lv1.EscalationPrompt
	answer chan *lv1.SignedDecision
	done   chan struct{}
	reason string // why it ended without an answer
	// cancelled is closed by the terminal when its session closes while
	// the prompt is shown.
	cancelled  chan struct{}
	cancelOnce sync.Once
}

// escRequest is one verified request.
type escRequest struct {
	recv    time.Time // when the coordinator read it (timing logs)
	req     *lv1.EscalationRequest
	sess    *escSession
	dir     *mailbox.Dir // its result directory
	cancel  chan struct{}
	cancelO sync.Once
	// ackSeq is the highest acknowledged sequence (acks are cumulative and
	// may be read out of order); ackNote wakes the executing worker.
	ackSeq  atomic.Uint64
	ackNote chan struct{}
	lastAck atomic.Int64 // unix nanos of the last ack or keepalive
	final   chan struct{}
	finalO  sync.Once
}

func (r *escRequest) id() string { return r.req.RequestId }

func (r *escRequest) doCancel() { r.cancelO.Do(func() { close(r.cancel) }) }

// newEscalations creates the generation's mailbox directories (host-private,
// Domain- and generation-scoped under the 0700 runtime directory) and their
// mount points, and opens the audit log.
func newEscalations(c *coordinator) (*escalations, error) {
	base := filepath.Join(c.paths.RuntimeDir, "mailbox", "g"+strconv.FormatUint(c.generation, 10))
	e := &escalations{
		c: c, log: c.log.With("component", "escalation"), gen: c.anchor.Identity(),
		sandbox: c.anchor.SandboxPublicKey(), coord: c.anchor.CoordinatorCredential(),
		hostReq: filepath.Join(base, "requests"), hostRes: filepath.Join(base, "results"),
		rules: c.profile.AutoApprove, workspace: c.ws,
		seen: map[string]struct{}{}, active: map[string]*escRequest{}, sessions: map[string]*escSession{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	e.home, _ = os.UserHomeDir()
	e.user = os.Getenv("USER")
	// A dead generation's mailbox (this coordinator holds the Domain lock,
	// so no other generation lives) is removed first.
	os.RemoveAll(filepath.Dir(base))
	points := filepath.Join(c.paths.ControlMountSource(), "mailbox")
	// Host side, the generation's mailbox lies in a private (0700)
	// directory. Inside, every guest user (the profile's non-root session
	// user too) reaches the mount points, writes requests and reads results;
	// a request is routed by its Session Request Capability, not its owner.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(base), escMailboxDirMode}, {base, escMailboxDirMode}, {e.hostReq, 0o777}, {e.hostRes, escResultDirMode},
		{points, escResultDirMode}, {filepath.Join(points, "requests"), escResultDirMode}, {filepath.Join(points, "results"), escResultDirMode}} {
		if err := os.Mkdir(d.path, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create escalation mailbox: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil { // beyond the umask
			return nil, fmt.Errorf("create escalation mailbox: %w", err)
		}
	}
	var err error
	if e.requests, err = mailbox.OpenDir(e.hostReq); err != nil {
		return nil, err
	}
	if e.results, err = mailbox.OpenDir(e.hostRes); err != nil {
		return nil, err
	}
	if e.audit, err = audit.Open(c.paths.DomainRoot, nil); err != nil {
		return nil, err
	}
	go e.watch()
	return e, nil
}

// close ends every request (killing and reaping host processes) and the
// watcher (Domain teardown).
func (e *escalations) close() {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	var ss []*escSession
	for _, s := range e.sessions {
		ss = append(ss, s)
	}
	e.mu.Unlock()
	close(e.stop)
	<-e.done
	for _, s := range ss {
		s.once.Do(func() { close(s.gone) })
	}
	e.wg.Wait()
	e.requests.Close()
	e.results.Close()
	e.audit.Close()
}

// attachTerminal registers an interactive session's prompt port (called by
// its terminal loop once the session runs).
func (e *escalations) attachTerminal(sessionID string) *promptPort {
	if e == nil {
		return nil
	}
	p := newPromptPort()
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.sessions[sessionID]; s != nil {
		s.port = p
	} else {
		e.sessions[sessionID] = &escSession{id: sessionID, port: p, queue: make(chan *escRequest, escSessionQueue), gone: make(chan struct{})}
	}
	return p
}

// sessionGone ends the session's requests: pending ones fail, a running
// host process is killed and reaped (the model's session loss).
func (e *escalations) sessionGone(sessionID string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	s := e.sessions[sessionID]
	delete(e.sessions, sessionID)
	e.mu.Unlock()
	if s != nil {
		s.once.Do(func() { close(s.gone) })
	}
}

// watch scans the request directory until close: at once whenever inotify
// reports an entry (the sandbox's rename reaches the host directory), and
// every escRescan in case; without inotify it polls.
func (e *escalations) watch() {
	defer close(e.done)
	var wake <-chan struct{}
	if w, err := e.requests.Watch(); err != nil {
		e.log.Warn("escalation mailbox: no inotify, polling", "err", err)
	} else {
		defer w.Close()
		wake = w.C
	}
	idle := 0
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		names, err := e.requests.Names(escScanBatch)
		if err != nil {
			e.log.Error("escalation mailbox unreadable", "err", err)
		}
		handled := 0
		for _, n := range names {
			if strings.HasPrefix(n, ".") {
				continue // a writer's temporary entry
			}
			handled++
			e.entry(n)
		}
		if handled > 0 {
			idle = 0
			continue
		}
		if wake != nil {
			select {
			case <-e.stop:
				return
			case <-wake:
			case <-time.After(escRescan):
			}
			continue
		}
		d := escPollBusy
		if idle++; idle > 500 {
			d = escPollIdle
		}
		select {
		case <-e.stop:
			return
		case <-time.After(d):
		}
	}
}

// refuse records a refused entry (rate-limited in the audit log).
func (e *escalations) refuse(name string, err error) {
	now := time.Now()
	e.mu.Lock()
	if now.Sub(e.refusedWindow) >= time.Second {
		if e.refusedQuiet > 0 {
			e.log.Warn("escalation entries refused without an audit line", "count", e.refusedQuiet)
		}
		e.refusedWindow, e.refusedCount, e.refusedQuiet = now, 0, 0
	}
	e.refusedCount++
	loud := e.refusedCount <= escRefusalAudits
	if !loud {
		e.refusedQuiet++
	}
	e.mu.Unlock()
	if loud {
		e.log.Warn("escalation mailbox entry refused", "entry", record.EscapeText(name), "err", err)
		e.audit.Append(audit.Entry{Event: audit.EventRefused, Generation: e.gen.Generation, Reason: record.EscapeText(name) + ": " + err.Error()})
	}
}

// entry handles one mailbox entry: read once through the confined handle
// (links and non-regular files refused, bounded before allocation), then
// dispatched by kind; every record's signature is verified before parsing.
func (e *escalations) entry(name string) {
	b, err := e.requests.ReadEntry(name, record.MaxRecordBytes)
	if errors.Is(err, mailbox.ErrVanished) {
		return
	}
	if err != nil {
		e.refuse(name, err)
		return
	}
	switch {
	case strings.HasSuffix(name, escalate.RequestSuffix):
		e.ingest(name, b)
	case strings.HasSuffix(name, escalate.CancelSuffix):
		var m lv1.EscalationCancellation
		if err := record.Open(b, record.KindCancellation, e.sandbox, &m); err != nil {
			e.refuse(name, err)
			return
		}
		if r := e.lookup(m.RequestId, m.Generation); r != nil {
			r.doCancel()
		}
	case strings.HasSuffix(name, escalate.AckSuffix):
		var m lv1.EscalationAck
		if err := record.Open(b, record.KindAck, e.sandbox, &m); err != nil {
			e.refuse(name, err)
			return
		}
		if r := e.lookup(m.RequestId, m.Generation); r != nil {
			r.lastAck.Store(time.Now().UnixNano())
			if m.Final {
				r.finalO.Do(func() { close(r.final) })
			}
			for {
				cur := r.ackSeq.Load()
				if m.Sequence <= cur || r.ackSeq.CompareAndSwap(cur, m.Sequence) {
					break
				}
			}
			select {
			case r.ackNote <- struct{}{}:
			default: // a wake-up is pending
			}
		}
	default:
		e.refuse(name, errdefs.New(errdefs.ErrRefused, "unknown mailbox entry kind"))
	}
}

func (e *escalations) lookup(id string, gen uint64) *escRequest {
	if gen != e.gen.Generation {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active[id]
}

// ingest is ReceiveEscalation: a request verified with the generation's
// sandbox key, for this generation, not replayed, bound to a live session
// by a capability the coordinator signed.
func (e *escalations) ingest(name string, b []byte) {
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
	r := &escRequest{recv: recv, req: &req, dir: dir, cancel: make(chan struct{}), ackNote: make(chan struct{}, 1), final: make(chan struct{})}
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
		s = &escSession{id: claims.SessionID, queue: make(chan *escRequest, escSessionQueue), gone: make(chan struct{})}
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
		e.finishEarly(r, lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, fmt.Sprintf("session already has %d pending requests", escSessionQueue))
	}
}

// liveSession reports whether the session is registered (caller holds e.mu;
// takes c.mu).
func (e *escalations) liveSession(id string) bool {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	_, ok := e.c.sessions[id]
	return ok
}

func (e *escalations) checkRequest(req *lv1.EscalationRequest) error {
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

func (e *escalations) forget(r *escRequest) {
	e.mu.Lock()
	delete(e.active, r.id())
	e.mu.Unlock()
}

// finishEarly answers a request that never reached a session worker.
func (e *escalations) finishEarly(r *escRequest, outcome lv1.EscalationOutcome, reason string) {
	e.writeResult(r, &lv1.EscalationResult{Outcome: outcome, ExitCode: -1, Reason: reason}, 0, nil)
	e.wg.Add(1)
	go e.cleanup(r)
}

// writeResult publishes the one terminal result (DeliverResult), after its
// audit entry is appended and fsynced.
func (e *escalations) writeResult(r *escRequest, res *lv1.EscalationResult, bytes uint64, approved []string) {
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
	b, err := record.Seal(record.KindResult, res, e.c.anchor.SignAsCoordinator)
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
func (e *escalations) cleanup(r *escRequest) {
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
func (e *escalations) worker(s *escSession) {
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
func (e *escalations) handle(s *escSession, r *escRequest) {
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
// a command that requires a shell: config.Rule.Matches checks it).
func (e *escalations) matchRule(argv []string, cwd string) *config.Rule {
	for i := range e.rules {
		if e.rules[i].Matches(argv, cwd) {
			return &e.rules[i]
		}
	}
	return nil
}

// decide is AutoApprove, or QueuePrompt/BeginPrompt and the developer's
// signed DeveloperApprove/DeveloperDeny at the session's own terminal.
func (e *escalations) decide(s *escSession, r *escRequest) (argv []string, by string, ok bool) {
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
	ask := &promptAsk{
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
func (e *escalations) awaitPort(s *escSession, r *escRequest) *promptPort {
	deadline := time.Now().Add(identifyTimeout + 5*time.Second)
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
func (e *escalations) interactive(id string) bool {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	s := e.c.sessions[id]
	return s != nil && s.tty
}

// hostEnv is the documented minimal environment of a host command.
func (e *escalations) hostEnv(id string) []string {
	env := []string{"PATH=" + escHostPath, "LANG=C.UTF-8", "TERM=dumb", "LAZARET_ESCALATION_ID=" + id, "LAZARET_DOMAIN_ID=" + e.gen.DomainID}
	if e.home != "" {
		env = append(env, "HOME="+e.home)
	}
	if e.user != "" {
		env = append(env, "USER="+e.user, "LOGNAME="+e.user)
	}
	return env
}

// lookPath resolves the program without a shell: a name is searched in
// escHostPath and an absolute path used as given (host paths the developer
// approved); a relative path is opened beneath the held working directory
// without following any symlink and executed through that descriptor, so
// the sandbox cannot swap it between the check and the exec. A relative
// script is refused (through a descriptor its interpreter would see $0 as
// /proc/self/fd/N): run it through its interpreter. prog is the path to
// execute; held, when not nil, is the descriptor it names and must stay
// open until the child has executed.
func lookPath(prog string, dir *os.File) (path string, held *os.File, err error) {
	check := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	switch {
	case filepath.IsAbs(prog):
		if check(prog) {
			return prog, nil, nil
		}
		return "", nil, errdefs.New(errdefs.ErrInvalid, "%s is not an executable file on the host", record.EscapeText(prog))
	case strings.Contains(prog, "/"):
		f, err := mailbox.FileBeneath(dir, filepath.Clean(prog))
		if err != nil {
			return "", nil, err
		}
		head := make([]byte, 4)
		n, _ := f.ReadAt(head, 0)
		if n != 4 || string(head) != "\x7fELF" {
			f.Close()
			return "", nil, errdefs.New(errdefs.ErrInvalid, "%s is not an executable binary: a program given by a relative path runs only through its descriptor, which a script's interpreter cannot use; ask for `sh %s` (or its interpreter) instead", record.EscapeText(prog), record.EscapeText(prog))
		}
		return mailbox.HeldPath(f), f, nil
	}
	for _, d := range strings.Split(escHostPath, ":") {
		if p := filepath.Join(d, prog); check(p) {
			return p, nil, nil
		}
	}
	return "", nil, errdefs.New(errdefs.ErrInvalid, "%s was not found in the host PATH %s", record.EscapeText(prog), escHostPath)
}

// hostRoute is StartHostExecution's terminal side. For an interactive
// session the terminal loop switches the route to HostProcess — its PTY is
// no longer read, no input, resize or signal event reaches the sandbox —
// and tells the CLI, before the process may run; a session that is closing
// (or whose client or PTY is lost) starts none. It returns the run (nil for
// a session without a terminal) or, when the process must not start, the
// result to answer.
func (e *escalations) hostRoute(s *escSession, r *escRequest, argv []string, by string) (*hostRun, *lv1.EscalationResult) {
	if h := e.hooks.beforeHostRoute; h != nil {
		h(r.id())
	}
	refuse := func(o lv1.EscalationOutcome, reason string) *lv1.EscalationResult {
		return &lv1.EscalationResult{Outcome: o, ExitCode: -1, Reason: reason, ApprovedArgv: argv}
	}
	port := e.awaitPort(s, r)
	if port == nil {
		select {
		case <-s.gone:
			return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
		case <-r.cancel:
			return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
		default:
		}
		if e.interactive(s.id) {
			return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session's terminal is not available")
		}
		return nil, nil // no terminal: no route to hold
	}
	cwd := ocispec.WorkspaceDir
	if r.req.Cwd != "" {
		cwd += "/" + r.req.Cwd
	}
	run := newHostRun(&lv1.HostProcessStarted{RequestId: r.id(), Argv: argv, Cwd: cwd, DecidedBy: by})
	select {
	case port.hosts <- run:
	case <-port.closed:
		return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "the session closed before the host command started")
	case <-s.gone:
		return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
	case <-r.cancel:
		return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
	}
	<-run.routed // the loop closes it as soon as the route is HostProcess
	return run, nil
}

type escOutput struct {
	stream lv1.EscalationStream
	data   []byte
	eof    bool
}

// execute is StartHostExecution … CompleteHostExecution / FailHostExecution
// / CancelRequest / TimeoutRequest: the approved argv runs with execve
// through the causal broker; output is chunked back with at most
// record.MaxUnacked unacknowledged chunks (the pipes are not read beyond
// that); cancellation, session loss and the acknowledgement timeout kill
// and reap the exact process before the result is written.
func (e *escalations) execute(s *escSession, r *escRequest, argv []string, by string) {
	log := e.log.With("request_id", r.id(), "session_id", s.id)
	failed := func(reason string) {
		e.mtHostFailed(r)
		e.writeResult(r, &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, ExitCode: -1, Reason: reason, ApprovedArgv: argv}, 0, argv)
	}
	// The working directory is held open and the child enters it through
	// the descriptor (HeldPath): a symlink swapped in after the check moves
	// nothing out of the workspace.
	held, err := mailbox.DirBeneath(e.workspace, r.req.Cwd)
	if err != nil {
		failed(err.Error())
		return
	}
	defer held.Close()
	dir := held.Name()
	prog, progFile, err := lookPath(argv[0], held)
	if err != nil {
		failed(err.Error())
		return
	}
	if progFile != nil {
		defer progFile.Close()
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		failed(err.Error())
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		failed(err.Error())
		return
	}
	// StartHostExecution: an interactive session's route is HostProcess
	// before the process may run, and a closing session starts none.
	run, refused := e.hostRoute(s, r, argv, by)
	e.mtHostRouted(r, refused)
	if refused != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		log.Info("host command not started", "reason", refused.Reason)
		e.writeResult(r, refused, 0, argv)
		return
	}
	defer run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, -1, 0, "the host execution ended") // if not reported below
	stopC := run.stopC()
	t0 := time.Now()
	child, err := e.c.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "escalation_exec",
		ExecStop: true, // no wrapper re-exec of this binary per command
		Target:   proc.Command{Path: prog, Args: argv, Env: e.hostEnv(r.id()), Dir: mailbox.HeldPath(held), Files: []*os.File{nil, outW, errW}, Setsid: true},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			select {
			case <-stopC: // stopped before its first instruction
				return errdefs.Mark(fmt.Errorf("%w: %s", errHostStopped, run.stopWhy), errdefs.ErrRefused)
			default:
			}
			return e.audit.Append(audit.Entry{Event: audit.EventExecute, Generation: e.gen.Generation, RequestID: r.id(), SessionID: s.id, Argv: argv, Cwd: dir, Process: id.String(), DecidedBy: by})
		},
	})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if errors.Is(err, errHostStopped) {
			log.Info("host command not started", "reason", run.stopWhy)
			e.mtHostStopped(r)
			e.writeResult(r, &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, ExitCode: -1, Reason: run.stopWhy, ApprovedArgv: argv}, 0, argv)
			run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, -1, 0, run.stopWhy)
			return
		}
		reason := fmt.Sprintf("start %s: %v", record.EscapeText(argv[0]), err)
		failed(reason)
		run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, -1, 0, reason)
		return
	}
	t1 := time.Now()
	if h := e.hooks.hostStarted; h != nil {
		h(r.id(), child)
	}
	log.Info("host command started", "program", prog, "identity", child.Identity().String(), "decide_us", t0.Sub(r.recv).Microseconds(), "acquire_us", t1.Sub(t0).Microseconds())
	var t2 time.Time
	outC := make(chan escOutput)
	quit := make(chan struct{})
	reader := func(f *os.File, st lv1.EscalationStream) {
		defer f.Close()
		for {
			buf := make([]byte, record.MaxChunkData)
			n, err := f.Read(buf)
			if n > 0 {
				select {
				case outC <- escOutput{stream: st, data: buf[:n]}:
				case <-quit:
					return
				}
			}
			if err != nil {
				select {
				case outC <- escOutput{stream: st, eof: true}:
				case <-quit:
				}
				return
			}
		}
	}
	go reader(outR, lv1.EscalationStream_ESCALATION_STREAM_STDOUT)
	go reader(errR, lv1.EscalationStream_ESCALATION_STREAM_STDERR)
	defer close(quit)

	var seq, acked, total uint64
	eofs := 0
	childDone := child.Done()
	exited := false
	var drainDeadline <-chan time.Time
	cancelC := r.cancel
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	kill := func(outcome lv1.EscalationOutcome, reason string) {
		// The whole process group the command leads (Setsid), through its
		// pidfd: a shell's children die with it rather than outlive the
		// request (and its session).
		e.mtHostKilled(r, outcome)
		child.SignalGroup(unix.SIGKILL)
		child.Signal(unix.SIGKILL)
		<-child.Done() // reaped by the broker through the pidfd
		outR.Close()
		errR.Close()
		for i := acked + 1; i <= seq; i++ {
			r.dir.Remove(escalate.ChunkName(i))
		}
		log.Info("host command stopped", "reason", reason)
		e.writeResult(r, &lv1.EscalationResult{Outcome: outcome, ExitCode: -1, Signal: int32(unix.SIGKILL), Reason: reason, LastSequence: 0, ApprovedArgv: argv}, total, argv)
		// Only now (killed, reaped, audited, answered) may the terminal
		// route return to the sandbox.
		run.finish(outcome, -1, int32(unix.SIGKILL), reason)
	}
	for {
		if exited && eofs == 2 && acked == seq {
			break
		}
		var takeC <-chan escOutput
		if eofs < 2 && seq-acked < record.MaxUnacked {
			takeC = outC
		}
		select {
		case o := <-takeC:
			if o.eof {
				eofs++
				continue
			}
			seq++
			total += uint64(len(o.data))
			b, err := record.Seal(record.KindChunk, &lv1.ResultChunk{RequestId: r.id(), Generation: e.gen.Generation, Sequence: seq, Stream: o.stream, Data: o.data}, e.c.anchor.SignAsCoordinator)
			if err == nil {
				err = r.dir.Publish(escalate.ChunkName(seq), b)
			}
			if err != nil {
				kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "publish result chunk: "+err.Error())
				return
			}
		case <-r.ackNote:
			a := r.ackSeq.Load()
			if a > seq {
				kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "acknowledgement of an unsent chunk")
				return
			}
			for i := acked + 1; i <= a; i++ {
				r.dir.Remove(escalate.ChunkName(i))
			}
			acked = max(acked, a)
		case <-childDone:
			childDone, exited, t2 = nil, true, time.Now()
			drainDeadline = time.After(drainTimeout)
			// CompleteHostExecution: the process is gone, the route is
			// the sandbox route again (its output may still be draining
			// to the requester).
			st, _ := child.Status()
			e.mtHostExited(r)
			if st.Exited {
				run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED, int32(st.Code), 0, "")
			} else {
				run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED, -1, int32(st.Signal), "")
			}
		case <-drainDeadline:
			// A daemonized descendant keeps the pipes open: stop reading.
			outR.Close()
			errR.Close()
			drainDeadline = nil
		case <-cancelC:
			if exited {
				cancelC = nil
				continue
			}
			kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
			return
		case <-stopC:
			// The developer cancelled at the session's terminal, or the
			// session is closing (its close handshake waits for this).
			if exited {
				stopC = nil
				continue
			}
			kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, run.stopWhy)
			return
		case <-s.gone:
			kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
			return
		case <-tick.C:
			if time.Since(time.Unix(0, r.lastAck.Load())) > escAckTimeout {
				kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT, "the requester stopped acknowledging")
				return
			}
		}
	}
	st, werr := child.Status()
	log.Info("host command ended", "status", st.String(), "run_us", t2.Sub(t1).Microseconds(), "drain_us", time.Since(t2).Microseconds(), "chunks", seq, "bytes", total)
	res := &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED, ExitCode: int32(st.Code), LastSequence: seq, ApprovedArgv: argv}
	if !st.Exited {
		res.ExitCode, res.Signal = -1, int32(st.Signal)
	}
	if werr != nil {
		res.Outcome, res.Reason = lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, werr.Error()
	}
	e.writeResult(r, res, total, argv)
}
