package escalation

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/mailbox"
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
	sessionQueue       = 16                    // queued requests per session
	escDecisionDefault = 5 * time.Minute
	escDecisionMax     = time.Hour
	// escAckTimeout: a request whose client stops acknowledging (it
	// re-acknowledges every escalate.KeepaliveInterval) is cancelled and
	// its host process killed.
	escAckTimeout       = 10 * time.Second
	defaultTerminalWait = 15 * time.Second // a terminal loop identifies its guest within 10 s
	defaultDrainTimeout = 2 * time.Second
	escFinalAckWait     = 30 * time.Second
	escRefusalAudits    = 20 // refusals audited per second (the rest are counted)
	escMaxArgvBytes     = 32 << 10
	escMaxWhyBytes      = 4 << 10
	escHostPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	escResultDirMode    = 0o755
	escMailboxDirMode   = 0o700
)

// errHostStopped reports a host command stopped at its launch barrier
// (its session closed or the developer cancelled it): it never ran.
var errHostStopped = errors.New("host command stopped before it ran")

// Sessions is the coordinator's view of its Client Sessions.
type Sessions interface {
	// Session reports whether the session is registered (live) and whether
	// it is interactive (has a terminal). It may take the coordinator's
	// lock: the Service calls it holding only its own.
	Session(id string) (live, interactive bool)
}

// Launcher starts host processes through the coordinator's causal broker.
type Launcher interface {
	Acquire(ctx context.Context, spec proc.AcquireSpec) (*proc.Child, error)
}

// Config is what the escalation role needs from its coordinator.
type Config struct {
	Log *slog.Logger
	// Anchor is the generation's trust anchor: its identity, the sandbox's
	// public key, the coordinator credential and signer.
	Anchor *trust.Anchor
	// RuntimeDir holds the generation's mailbox (mailbox/g<generation>);
	// ControlMount is the control mount's host source, where the mailbox
	// mount points are created; DomainRoot holds the audit log.
	RuntimeDir, ControlMount, DomainRoot string
	// Workspace is the host workspace directory host commands run in.
	Workspace string
	// Rules are the profile's auto_approve rules.
	Rules    []config.Rule
	Sessions Sessions
	Launcher Launcher
	// Model records the role's model-trace steps; nil records none.
	Model Model
	// TerminalWait bounds how long a request of an interactive session
	// waits for its terminal loop to serve the prompt port; DrainTimeout
	// how long a host command's output is read after it exited.
	TerminalWait, DrainTimeout time.Duration
}

// Service is the generation's escalation service.
type Service struct {
	cfg        Config
	log        *slog.Logger
	anchor     *trust.Anchor
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
	active   map[string]*request
	sessions map[string]*session
	closed   bool

	refusedWindow time.Time
	refusedCount  int
	refusedQuiet  int

	// model is the role's model-trace state, guarded by the Model's lock.
	model modelState

	stop chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	// Hooks are ordering seams for tests; nil in production. Set them
	// before the first request arrives.
	Hooks struct {
		// BeforeHostRoute runs after the decision, before the worker asks
		// the terminal loop for the HostProcess route.
		BeforeHostRoute func(requestID string)
		// HostStarted runs once the host process is released.
		HostStarted func(requestID string, child *proc.Child)
	}
}

// session is one session's escalation state: its request queue (the
// model's activeRequest is the one its worker handles) and, for an
// interactive session, the prompt port its terminal loop serves.
type session struct {
	id     string
	claims *trust.CapabilityClaims
	queue  chan *request
	gone   chan struct{}
	port   *Port
	once   sync.Once
}

// request is one verified request.
type request struct {
	recv    time.Time // when the coordinator read it (timing logs)
	req     *lv1.EscalationRequest
	sess    *session
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

func (r *request) id() string { return r.req.RequestId }

func (r *request) doCancel() { r.cancelO.Do(func() { close(r.cancel) }) }

// New creates the generation's mailbox directories (host-private,
// Domain- and generation-scoped under the 0700 runtime directory) and their
// mount points, opens the audit log and starts the mailbox watcher. A dead
// generation's mailbox is removed first (recovery: the caller holds the
// Domain lock, so no other generation lives).
func New(cfg Config) (*Service, error) {
	if cfg.TerminalWait <= 0 {
		cfg.TerminalWait = defaultTerminalWait
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = defaultDrainTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	gen := cfg.Anchor.Identity()
	base := filepath.Join(cfg.RuntimeDir, "mailbox", "g"+strconv.FormatUint(gen.Generation, 10))
	e := &Service{
		cfg: cfg, log: cfg.Log.With("component", "escalation"), anchor: cfg.Anchor, gen: gen,
		sandbox: cfg.Anchor.SandboxPublicKey(), coord: cfg.Anchor.CoordinatorCredential(),
		hostReq: filepath.Join(base, "requests"), hostRes: filepath.Join(base, "results"),
		rules: cfg.Rules, workspace: cfg.Workspace,
		seen: map[string]struct{}{}, active: map[string]*request{}, sessions: map[string]*session{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	e.home, _ = os.UserHomeDir()
	e.user = os.Getenv("USER")
	// A dead generation's mailbox (this coordinator holds the Domain lock,
	// so no other generation lives) is removed first.
	os.RemoveAll(filepath.Dir(base))
	points := filepath.Join(cfg.ControlMount, "mailbox")
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
	if e.audit, err = audit.Open(cfg.DomainRoot, nil); err != nil {
		return nil, err
	}
	go e.watch()
	return e, nil
}

// MailboxDirs returns the generation's host request and result
// directories (bound into the sandbox by the supervisor).
func (e *Service) MailboxDirs() (requests, results string) { return e.hostReq, e.hostRes }

// Audit appends a synced entry to the Domain's audit log (a network
// decision, which shares the escalation prompt's routing); nil-safe.
func (e *Service) Audit(entry audit.Entry) error {
	if e == nil || e.audit == nil {
		return nil
	}
	return e.audit.Append(entry)
}

// Port returns the session's prompt port once its terminal loop registered
// it, else nil.
func (e *Service) Port(sessionID string) *Port {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.sessions[sessionID]; s != nil {
		return s.port
	}
	return nil
}

// watcher (Domain teardown).
func (e *Service) Close() {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	var ss []*session
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
func (e *Service) attachTerminal(sessionID string) *Port {
	if e == nil {
		return nil
	}
	p := newPort()
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.sessions[sessionID]; s != nil {
		s.port = p
	} else {
		e.sessions[sessionID] = &session{id: sessionID, port: p, queue: make(chan *request, sessionQueue), gone: make(chan struct{})}
	}
	return p
}

// SessionGone ends the session's requests: pending ones fail, a running
// host process is killed and reaped (the model's session loss).
func (e *Service) SessionGone(sessionID string) {
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
func (e *Service) watch() {
	defer close(e.done)
	var wake <-chan struct{}
	if w, err := e.requests.Watch(); err != nil {
		e.log.Warn("escalation mailbox: no inotify, polling", "err", err)
	} else {
		// Closing an inotify instance waits for the kernel's mark reaper
		// (an SRCU grace period: 8-20 ms measured here), which teardown
		// need not wait for: the watcher ends in the background, while
		// the rest of the teardown runs.
		defer func() { go w.Close() }()
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
func (e *Service) refuse(name string, err error) {
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
func (e *Service) entry(name string) {
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

func (e *Service) lookup(id string, gen uint64) *request {
	if gen != e.gen.Generation {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active[id]
}
