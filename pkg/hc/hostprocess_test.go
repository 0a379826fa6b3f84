package hc

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/hc/escalation"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
	"github.com/lazaret/lazaret/pkg/pty"
)

// These tests drive one interactive session's event loop (sessionterm.Serve)
// with a real PTY, a real exec client (cat, through the broker) and the
// real escalation service, without runsc: the session's "guest command" is
// cat. Ordering is injected — unbuffered client frames (a send returns once
// the loop took the frame), the escalation hooks, the exec client's stdin
// — never sleeps.

func TestMain(m *testing.M) {
	proc.MaybeRunWrapper() // the broker's fallback barrier re-executes the test binary
	os.Exit(m.Run())
}

// termHarness is one interactive session of an escFixture.
type termHarness struct {
	t      *testing.T
	f      *escFixture
	sid    string
	master *pty.Master
	exec   *proc.Child
	stdin  *os.File // the exec client's stdin (echo mode: nil)
	slave  *os.File // a second slave descriptor held by the test (hold), else nil
	frames chan *lv1.ClientFrame
	server chan *lv1.ServerFrame
	ended  chan bool // the loop's result
}

// newTermHarness starts a session loop. With echo the exec client's stdin is
// the PTY too (it echoes what reaches the terminal); otherwise its stdin is
// a pipe the test writes and closes (closing ends the session's command).
// With hold the test keeps a slave descriptor: the close handshake's drain
// lasts until the test closes it (the drain deadline is an hour away).
func newTermHarness(t *testing.T, f *escFixture, echo, hold bool) *termHarness {
	broker := proctest.SelfBroker(t)
	f.c.broker = broker
	h := &termHarness{t: t, f: f, sid: f.session(true), frames: make(chan *lv1.ClientFrame), server: make(chan *lv1.ServerFrame, 64), ended: make(chan bool, 1)}
	master, slave, err := pty.Open(pty.Size{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	if err := pty.MakeRaw(slave); err != nil {
		t.Fatal(err)
	}
	h.master = master
	in := slave
	var inR *os.File
	if !echo {
		if inR, h.stdin, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		in = inR
	}
	h.exec, err = broker.Start("test_exec", proc.Command{Path: "/bin/cat", Args: []string{"cat"}, Dir: "/", Files: []*os.File{in, slave, slave}})
	if hold {
		h.slave = slave
	} else {
		slave.Close() // the exec client holds the only slave descriptors
	}
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, cli := net.Pipe()
	s := &session{id: h.sid, c: f.c, conn: control.NewConn(srv), raw: srv, tty: true, child: h.exec}
	f.c.mu.Lock()
	f.c.sessions.Admit(h.sid, s, 0)
	f.c.mu.Unlock()
	// The drain deadline is an hour away: the test decides when it ends.
	att := sessionterm.Attached{
		Domain:  sessionterm.Domain{Broker: broker, Log: slog.New(slog.DiscardHandler)},
		Session: sessionterm.Session{ID: h.sid, Conn: s.conn, Raw: srv, Stopped: s.wasStopped},
		Master:  master, Child: h.exec, Drain: time.Hour,
	}
	go func() {
		client := control.NewConn(cli)
		for {
			var fr lv1.ServerFrame
			if err := client.Read(&fr); err != nil {
				close(h.server)
				return
			}
			h.server <- &fr
		}
	}()
	go func() {
		h.ended <- sessionterm.Serve(att, h.frames, terminalRoutes{f.c.esc.Routing(h.sid, true)})
	}()
	t.Cleanup(func() {
		h.exec.Signal(unix.SIGKILL)
		<-h.exec.Done()
		master.Close()
		srv.Close()
		cli.Close()
	})
	return h
}

// next returns the next server frame.
func (h *termHarness) next() *lv1.ServerFrame {
	h.t.Helper()
	select {
	case fr, ok := <-h.server:
		if !ok {
			h.t.Fatal("the session connection closed")
		}
		return fr
	case <-time.After(30 * time.Second):
		h.t.Fatal("no server frame in 30s")
	}
	return nil
}

// send hands the loop one client frame; it returns once the loop took it.
func (h *termHarness) send(fr *lv1.ClientFrame) {
	h.t.Helper()
	select {
	case h.frames <- fr:
	case <-time.After(30 * time.Second):
		h.t.Fatal("the session loop did not take the frame")
	}
}

// port is the session's prompt port once the loop registered it.
func (h *termHarness) port() *escalation.Port {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p := h.f.e.Port(h.sid); p != nil {
			return p
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Fatal("the session loop registered no prompt port")
	return nil
}

// request puts a signed request of the session into the mailbox.
func (h *termHarness) request(argv ...string) *lv1.EscalationRequest {
	h.port() // the loop is serving the session
	req, b := h.f.request(h.sid, argv...)
	h.f.put(req.RequestId+escalate.RequestSuffix, b)
	return req
}

// approve is the developer's signed approval of req's argv.
func (h *termHarness) approve(req *lv1.EscalationRequest) *lv1.ClientFrame {
	sd, err := record.SignDecision(&lv1.DeveloperDecision{RequestId: req.RequestId, SessionId: h.sid, Generation: 5, Decision: lv1.DecisionKind_DECISION_KIND_APPROVE, ApprovedArgv: req.Argv},
		func(n string, b []byte) ([]byte, error) { return h.f.anchors[h.sid].Sign(n, b), nil })
	if err != nil {
		h.t.Fatal(err)
	}
	return &lv1.ClientFrame{Msg: &lv1.ClientFrame_EscalationDecision{EscalationDecision: sd}}
}

// closeSession ends the session's command (the exec client exits).
func (h *termHarness) closeSession() {
	h.t.Helper()
	if h.stdin != nil {
		h.stdin.Close()
		return
	}
	h.exec.Signal(unix.SIGKILL)
}

// untilExit reads frames up to the session's Exit and returns them.
func (h *termHarness) untilExit() []*lv1.ServerFrame {
	h.t.Helper()
	var got []*lv1.ServerFrame
	for {
		fr := h.next()
		got = append(got, fr)
		if fr.GetExit() != nil {
			select {
			case gone := <-h.ended:
				if gone {
					h.t.Error("the loop reported a lost client")
				}
			case <-time.After(30 * time.Second):
				h.t.Fatal("the loop did not return after Exit")
			}
			return got
		}
	}
}

// auditOf returns the request's audit events and the result's outcome.
func (h *termHarness) auditOf(id string) (events []string, outcome, reason string) {
	for _, e := range h.f.auditEntries() {
		if e.RequestID != id {
			continue
		}
		events = append(events, e.Event)
		if e.Event == audit.EventResult {
			outcome, reason = e.Outcome, e.Reason
		}
	}
	return events, outcome, reason
}

func hasEvent(events []string, ev string) bool {
	for _, e := range events {
		if e == ev {
			return true
		}
	}
	return false
}

// TestCloseWindowDecisionStartsNothing (§3.3 close handshake, §3.7): a
// developer approval that arrives while the session is closing never starts
// the host command, and the request is audited as cancelled — whether the
// decision frame itself comes after the close began (the loop refuses it)
// or the loop took it just before and the worker reaches the host start
// only after the close began (the loop no longer grants the HostProcess
// route).
func TestCloseWindowDecisionStartsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// taken: the loop takes the decision before the close begins.
		taken bool
	}{
		{"decision frame after the close began", false},
		{"decision taken, host start after the close began", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newEscFixture(t)
			reached, release := make(chan struct{}), make(chan struct{})
			f.e.Hooks.BeforeHostRoute = func(string) {
				close(reached)
				<-release
			}
			h := newTermHarness(t, f, false, !tc.taken)
			marker := filepath.Join(f.c.cfg.workspace, "ran")
			req := h.request("/usr/bin/touch", marker)
			if p := h.next().GetEscalationPrompt(); p == nil || p.RequestId != req.RequestId {
				t.Fatalf("expected the request's prompt, got %v", p)
			}
			port := h.port()
			if tc.taken {
				h.send(h.approve(req)) // the loop hands it to the worker
				<-reached              // verified and audited; not yet started
				h.closeSession()
				<-port.Closed() // the close handshake began
				close(release)
			} else {
				h.closeSession()
				<-port.Closed()
				if e := h.next().GetEscalationPromptEnd(); e == nil || !strings.Contains(e.Reason, "session closed") {
					t.Fatalf("expected the prompt's end, got %v", e)
				}
				h.send(h.approve(req)) // taken by the loop while it drains
				h.slave.Close()        // now the drain reaches EOF
			}
			frames := h.untilExit()
			res := f.result(req.RequestId)
			if res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED {
				t.Errorf("result %v, want cancelled", res)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the host command ran after its session started closing")
			}
			for _, fr := range frames {
				if fr.GetHostProcessStarted() != nil {
					t.Errorf("a host process was routed after the close began: %v", fr)
				}
			}
			events, outcome, reason := h.auditOf(req.RequestId)
			if hasEvent(events, audit.EventExecute) || outcome != "cancelled" {
				t.Errorf("audit %v, outcome %q (%s): want no execution and a cancelled result", events, outcome, reason)
			}
			if !tc.taken {
				close(release)
			}
		})
	}
}

// TestCloseKillsHostProcessBeforeExit (§3.3 close handshake, §3.7,
// NoOrphanHostProcess): a session whose command exits while its host
// command runs kills that exact process (gone by its pidfd), audits and
// answers the cancellation, tells the CLI, and only then drains the PTY
// output held meanwhile — in order, none lost — before the one Exit. While
// the host command ran the PTY was not read.
func TestCloseKillsHostProcessBeforeExit(t *testing.T) {
	f := newEscFixtureRules(t, []config.Rule{{Match: config.MatchPrefix, Argv: []string{"sleep"}}})
	started := make(chan *proc.Child, 1)
	f.e.Hooks.HostStarted = func(_ string, c *proc.Child) { started <- c }
	h := newTermHarness(t, f, false, false)
	io.WriteString(h.stdin, "before\n")
	if o := h.next().GetOutput(); string(o.GetData()) != "before\n" {
		t.Fatalf("output %q, want before", o.GetData())
	}
	req := h.request("sleep", "1000") // auto-approved: still the HostProcess route
	st := h.next().GetHostProcessStarted()
	if st == nil || st.RequestId != req.RequestId || st.DecidedBy != "auto-rule" || strings.Join(st.Argv, " ") != "sleep 1000" {
		t.Fatalf("expected HostProcessStarted for the request, got %v", st)
	}
	var child *proc.Child
	select {
	case child = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the host command did not start")
	}
	own, err := pidfs.Open(child.Handle().PID()) // an unreaped child: the pid is its own
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if !own.Matches(child.Identity().Authority) || !own.Alive() {
		t.Fatal("the host process is not the one started")
	}
	// The guest writes while the host command runs: held in the kernel.
	io.WriteString(h.stdin, "during\n")
	deadline := time.Now().Add(30 * time.Second)
	for n := inQueue(t, h.master); n != len("during\n"); n = inQueue(t, h.master) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes in the PTY, want the guest's 7: the master was read during HostProcess", n)
		}
		time.Sleep(time.Millisecond)
	}
	h.closeSession()
	frames := h.untilExit()
	var order []string
	var out strings.Builder
	for _, fr := range frames {
		switch {
		case fr.GetHostProcessEnded() != nil:
			order = append(order, "ended")
			e := fr.GetHostProcessEnded()
			if e.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED || !strings.Contains(e.Reason, "session closed") {
				t.Errorf("HostProcessEnded %v, want cancelled by the close", e)
			}
			// The frame is written only once the process is reaped.
			select {
			case <-child.Done():
			default:
				t.Error("HostProcessEnded before the host process was reaped")
			}
		case fr.GetOutput() != nil:
			if len(order) == 0 || order[len(order)-1] != "output" {
				order = append(order, "output")
			}
			out.Write(fr.GetOutput().GetData())
		case fr.GetExit() != nil:
			order = append(order, "exit")
		default:
			order = append(order, "other")
		}
	}
	if strings.Join(order, ",") != "ended,output,exit" {
		t.Errorf("frames after the close %v, want ended,output,exit", order)
	}
	if out.String() != "during\n" {
		t.Errorf("drained output %q, want the held %q", out.String(), "during\n")
	}
	if own.Alive() {
		t.Error("the host process is still alive by its pidfd after the session's Exit")
	}
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED || res.Signal != int32(unix.SIGKILL) {
		t.Errorf("result %v, want cancelled by SIGKILL", res)
	}
	events, outcome, reason := h.auditOf(req.RequestId)
	if !hasEvent(events, audit.EventExecute) || outcome != "cancelled" || !strings.Contains(reason, "session closed") {
		t.Errorf("audit %v, outcome %q (%s): want execute then a cancelled result", events, outcome, reason)
	}
}

// TestHostProcessRouteRefusesEvents (§3.3): while the session's host
// command runs, keystrokes and a resize are refused — not written to the
// PTY, not applied — and forwarding resumes once the exact process exited
// (HostProcessEnded, completed); the developer's HostProcessCancel of
// another request is refused, of this one it kills the process.
func TestHostProcessRouteRefusesEvents(t *testing.T) {
	f := newEscFixtureRules(t, []config.Rule{{Match: config.MatchPrefix, Argv: []string{"cat"}}, {Match: config.MatchPrefix, Argv: []string{"sleep"}}})
	h := newTermHarness(t, f, true, false)
	stdin := func(s string) *lv1.ClientFrame {
		return &lv1.ClientFrame{Msg: &lv1.ClientFrame_Stdin{Stdin: &lv1.StdinData{Data: []byte(s)}}}
	}
	h.send(stdin("before\n"))
	if o := h.next().GetOutput(); string(o.GetData()) != "before\n" {
		t.Fatalf("echo %q, want before", o.GetData())
	}
	fifo := filepath.Join(f.c.cfg.workspace, "ctl.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	req := h.request("cat", "ctl.fifo")
	if st := h.next().GetHostProcessStarted(); st == nil || st.RequestId != req.RequestId {
		t.Fatalf("expected HostProcessStarted, got %v", st)
	}
	size, _ := h.master.Size()
	// Each send returns once the loop took the frame; it handles one frame
	// completely before it selects again.
	h.send(stdin("during\n"))
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Resize{Resize: &lv1.Resize{Size: &lv1.WindowSize{Rows: 50, Cols: 132}}}})
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: randomID()}}})
	if got, _ := h.master.Size(); got != size {
		t.Errorf("resize applied during HostProcess: %v, was %v", got, size)
	}
	// The host command ends by itself: its fifo's writer closes.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // blocks until the host cat opened it
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	e := h.next().GetHostProcessEnded()
	if e == nil || e.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED || e.ExitCode != 0 {
		t.Fatalf("expected HostProcessEnded completed with 0, got %v", e)
	}
	h.send(stdin("after\n"))
	if o := h.next().GetOutput(); string(o.GetData()) != "after\n" {
		t.Fatalf("echo %q after the host command, want only %q (input typed during it must be gone)", o.GetData(), "after\n")
	}
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED {
		t.Errorf("result %v", res)
	}

	// The developer cancels a running host command from the terminal.
	req2 := h.request("sleep", "1000")
	if st := h.next().GetHostProcessStarted(); st == nil || st.RequestId != req2.RequestId {
		t.Fatalf("expected HostProcessStarted, got %v", st)
	}
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: req2.RequestId}}})
	if e := h.next().GetHostProcessEnded(); e == nil || e.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED || !strings.Contains(e.Reason, "developer") {
		t.Fatalf("expected HostProcessEnded cancelled by the developer, got %v", e)
	}
	if res := f.result(req2.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED {
		t.Errorf("result %v, want cancelled", res)
	}
	h.closeSession()
	h.untilExit()
}

// inQueue is the number of bytes waiting to be read on the master.
func inQueue(t *testing.T, m *pty.Master) int {
	t.Helper()
	n, err := m.Buffered()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
