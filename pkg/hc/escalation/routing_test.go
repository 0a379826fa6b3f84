package escalation

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/proc"
)

// fakeTerm is a session terminal: its route and the frames sent to its
// client.
type fakeTerm struct {
	mu     sync.Mutex
	route  Route
	routes []string
	frames chan *lv1.ServerFrame
}

func newFakeTerm() *fakeTerm {
	return &fakeTerm{route: RouteSandbox, frames: make(chan *lv1.ServerFrame, 64)}
}

func (t *fakeTerm) SetRoute(r Route) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.route = r
	t.routes = append(t.routes, t.name(r))
}

func (t *fakeTerm) name(r Route) string {
	return map[Route]string{RouteSandbox: "sandbox", RoutePrompt: "prompt", RouteHostProcess: "host"}[r]
}

func (t *fakeTerm) RouteName() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name(t.route)
}

func (t *fakeTerm) Send(f *lv1.ServerFrame) error { t.frames <- f; return nil }

func (t *fakeTerm) Log() *slog.Logger { return slog.New(slog.DiscardHandler) }

func (t *fakeTerm) sandbox() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.route == RouteSandbox
}

func (t *fakeTerm) history() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.routes, ",")
}

// termLoop is an interactive session's terminal loop as far as escalation
// routing goes: it serves the session's Routing, takes client frames one
// at a time and closes the routing when told (the close handshake).
type termLoop struct {
	t      *testing.T
	term   *fakeTerm
	frames chan *lv1.ClientFrame
	close  chan struct{}
	done   chan struct{}
}

func (f *fixture) serve(sid string) *termLoop {
	l := &termLoop{t: f.t, term: newFakeTerm(), frames: make(chan *lv1.ClientFrame), close: make(chan struct{}), done: make(chan struct{})}
	p, term := f.e.Routing(sid, true), l.term
	go func() {
		defer close(l.done)
		for {
			ch := p.Channels(l.term.sandbox(), false)
			select {
			case a := <-ch.Ask:
				p.Begin(term, a)
			case <-ch.AskDone:
				p.End(term)
			case h := <-ch.Host:
				p.StartHost(term, h)
			case <-ch.HostDone:
				p.EndHost(term)
			case fr := <-l.frames:
				if !p.Answer(term, fr, false) && !p.CancelHost(term, fr, false) {
					f.t.Errorf("frame not taken by escalation routing: %v", fr)
				}
			case <-l.close:
				p.Close(term)
				return
			}
		}
	}()
	f.t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			close(l.close)
			<-l.done
		}
	})
	return l
}

func (l *termLoop) next() *lv1.ServerFrame {
	l.t.Helper()
	select {
	case fr := <-l.term.frames:
		return fr
	case <-time.After(30 * time.Second):
		l.t.Fatal("no frame for the session's client in 30s")
	}
	return nil
}

func (l *termLoop) send(fr *lv1.ClientFrame) {
	l.t.Helper()
	select {
	case l.frames <- fr:
	case <-time.After(30 * time.Second):
		l.t.Fatal("the loop did not take the frame")
	}
}

// decision is the developer's signed decision on req.
func (f *fixture) decision(sid string, req *lv1.EscalationRequest, kind lv1.DecisionKind) *lv1.ClientFrame {
	d := &lv1.DeveloperDecision{RequestId: req.RequestId, SessionId: sid, Generation: f.gen(), Decision: kind}
	if kind == lv1.DecisionKind_DECISION_KIND_APPROVE {
		d.ApprovedArgv = req.Argv
	}
	sd, err := record.SignDecision(d, func(n string, b []byte) ([]byte, error) { return f.anchors[sid].Sign(n, b), nil })
	if err != nil {
		f.t.Fatal(err)
	}
	return &lv1.ClientFrame{Msg: &lv1.ClientFrame_EscalationDecision{EscalationDecision: sd}}
}

// TestEscalationPromptApprovedHostRoute: an interactive session's request
// is shown at its terminal (route Prompt), the developer's signed approval
// returns the route to the sandbox, the host command runs on the
// HostProcess route, and the route returns to the sandbox once the exact
// process is gone; the model steps follow in order.
func TestEscalationPromptApprovedHostRoute(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, true)
	l := f.serve(s)
	req := f.submit(s, "echo", "approved")
	p := l.next().GetEscalationPrompt()
	if p == nil || p.RequestId != req.RequestId || p.SessionId != s || strings.Join(p.Argv, " ") != "echo approved" {
		t.Fatalf("expected the request's prompt, got %v", p)
	}
	l.send(f.decision(s, req, lv1.DecisionKind_DECISION_KIND_APPROVE))
	st := l.next().GetHostProcessStarted()
	if st == nil || st.RequestId != req.RequestId || st.DecidedBy != "developer" {
		t.Fatalf("expected HostProcessStarted, got %v", st)
	}
	out, _, res := f.collect(req.RequestId)
	if res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED || out != "approved\n" {
		t.Errorf("result %v, output %q", res, out)
	}
	if e := l.next().GetHostProcessEnded(); e == nil || e.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED || e.ExitCode != 0 {
		t.Fatalf("expected HostProcessEnded completed, got %v", e)
	}
	if h := l.term.history(); h != "prompt,sandbox,host,sandbox" {
		t.Errorf("routes %s", h)
	}
	want := "ReceiveEscalation,QueuePrompt,BeginPrompt,DeveloperApprove,StartHostExecution,CompleteHostExecution,DeliverResult"
	if m := f.model.of(req.RequestId); m != want {
		t.Errorf("model steps %s, want %s", m, want)
	}
}

// TestEscalationPromptDenied: the developer's signed denial answers the
// request denied; nothing runs.
func TestEscalationPromptDenied(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, true)
	l := f.serve(s)
	req := f.submit(s, "touch", "x")
	if p := l.next().GetEscalationPrompt(); p == nil {
		t.Fatal("no prompt")
	}
	l.send(f.decision(s, req, lv1.DecisionKind_DECISION_KIND_DENY))
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED {
		t.Errorf("result %v", res)
	}
	if ev, _ := f.events(req.RequestId); strings.Contains(ev, audit.EventExecute) {
		t.Errorf("audit %s: a denied command executed", ev)
	}
	if m := f.model.of(req.RequestId); m != "ReceiveEscalation,QueuePrompt,BeginPrompt,DeveloperDeny,DeliverResult" {
		t.Errorf("model steps %s", m)
	}
}

// TestEscalationDeveloperCancelsHostProcess: on the HostProcess route the
// developer's HostProcessCancel of another request is refused, of this one
// it kills the process, reaped before the route returns.
func TestEscalationDeveloperCancelsHostProcess(t *testing.T) {
	f := newFixture(t, config.Rule{Match: config.MatchPrefix, Argv: []string{"sleep"}})
	started := make(chan *proc.Child, 1)
	f.e.Hooks.HostStarted = func(_ string, c *proc.Child) { started <- c }
	s := f.session(true, true)
	l := f.serve(s)
	req := f.submit(s, "sleep", "1000")
	if st := l.next().GetHostProcessStarted(); st == nil || st.DecidedBy != "auto-rule" {
		t.Fatalf("expected HostProcessStarted, got %v", st)
	}
	child := waitChild(t, started)
	l.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: randomID()}}})
	select {
	case <-child.Done():
		t.Fatal("a cancellation of another request stopped the host process")
	default:
	}
	l.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: req.RequestId}}})
	e := l.next().GetHostProcessEnded()
	if e == nil || e.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED || !strings.Contains(e.Reason, "developer") {
		t.Fatalf("expected HostProcessEnded cancelled by the developer, got %v", e)
	}
	assertGone(t, child)
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED {
		t.Errorf("result %v", res)
	}
	if h := l.term.history(); h != "host,sandbox" {
		t.Errorf("routes %s", h)
	}
}

// TestEscalationCloseCancelsPrompt: the close handshake cancels the shown
// prompt (the client is told), the request is answered cancelled, and no
// later request of the session is shown.
func TestEscalationCloseCancelsPrompt(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, true)
	l := f.serve(s)
	req := f.submit(s, "touch", "x")
	if p := l.next().GetEscalationPrompt(); p == nil {
		t.Fatal("no prompt")
	}
	close(l.close)
	<-l.done
	if e := l.next().GetEscalationPromptEnd(); e == nil || !strings.Contains(e.Reason, "session closed") {
		t.Fatalf("expected the prompt's end, got %v", e)
	}
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED {
		t.Errorf("result %v", res)
	}
	if m := f.model.of(req.RequestId); m != "ReceiveEscalation,QueuePrompt,BeginPrompt,CancelRequest,DeliverResult" {
		t.Errorf("model steps %s", m)
	}
	late := f.submit(s, "touch", "y")
	if res := f.result(late.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED {
		t.Errorf("request after the close: %v", res)
	}
}

// TestEscalationNetworkAsk: a network ask shares the prompt routing: it is
// shown at the session's terminal and returns the developer's verified
// decision; a decision bound to another prompt is refused; a session whose
// terminal serves no port is answered "no-terminal" without asking.
func TestEscalationNetworkAsk(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, true)
	l := f.serve(s)
	type answer struct {
		d          *lv1.DeveloperDecision
		by, reason string
	}
	ask := func(id string) <-chan answer {
		c := make(chan answer, 1)
		go func() {
			p := &lv1.EscalationPrompt{RequestId: id, Profile: "default", SessionId: s, Generation: f.gen(), NetworkHost: "example.com", NetworkPort: 443, TimeoutSeconds: 60}
			d, by, reason := f.e.Ask(s, f.anchors[s].Public(), p, time.Minute, 5*time.Second)
			c <- answer{d, by, reason}
		}()
		return c
	}
	decide := func(id, bound string) {
		p := l.next().GetEscalationPrompt()
		if p == nil || p.RequestId != id || p.NetworkHost != "example.com" {
			t.Fatalf("expected the network prompt %s, got %v", id, p)
		}
		sd, err := record.SignDecision(&lv1.DeveloperDecision{RequestId: bound, SessionId: s, Generation: f.gen(), Decision: lv1.DecisionKind_DECISION_KIND_APPROVE, NetworkScope: "once"},
			func(n string, b []byte) ([]byte, error) { return f.anchors[s].Sign(n, b), nil })
		if err != nil {
			t.Fatal(err)
		}
		l.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_EscalationDecision{EscalationDecision: sd}})
	}
	c := ask("net-5-1")
	decide("net-5-1", "net-5-1")
	if a := <-c; a.d == nil || a.by != "developer" || a.d.NetworkScope != "once" {
		t.Errorf("approved ask: %+v", a)
	}
	c = ask("net-5-2")
	decide("net-5-2", "net-5-1")
	if a := <-c; a.d != nil || a.by != "developer" || !strings.Contains(a.reason, "another request") {
		t.Errorf("decision bound to another prompt: %+v", a)
	}
	other := f.session(true, true) // interactive, but no loop serves it
	p := &lv1.EscalationPrompt{RequestId: "net-5-3", SessionId: other, Generation: f.gen()}
	if d, by, _ := f.e.Ask(other, f.anchors[other].Public(), p, time.Minute, 50*time.Millisecond); d != nil || by != "no-terminal" {
		t.Errorf("ask without a terminal loop: %v %s", d, by)
	}
}
