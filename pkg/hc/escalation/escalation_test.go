package escalation

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/proc"
)

// TestEscalationMailboxAdversarial: forged signatures, another generation,
// replayed IDs, oversize and truncated records, links, FIFOs and
// directories are each refused with no crash, no admission and no host
// execution; a request of a session that is gone fails; a decision signed
// by another session's anchor is not accepted.
func TestEscalationMailboxAdversarial(t *testing.T) {
	f := newFixture(t, config.Rule{Argv: []string{"true"}})
	s1 := f.session(true, false)
	gone := f.session(false, false)

	// Forged: signed by a key that is not the sandbox's.
	_, otherKey, _ := ed25519.GenerateKey(nil)
	req, _ := f.request(s1, "true")
	forged, _ := record.Seal(record.KindRequest, req, record.KeySigner(otherKey))
	f.put(req.RequestId+escalate.RequestSuffix, forged)
	// Another generation.
	old, _ := f.request(s1, "true")
	old.Generation = 4
	oldB, _ := record.Seal(record.KindRequest, old, record.KeySigner(f.sandbox))
	f.put(old.RequestId+escalate.RequestSuffix, oldB)
	// Oversize, truncated, a record of another kind under a request name.
	f.put("big"+escalate.RequestSuffix, make([]byte, record.MaxRecordBytes+1))
	trunc, truncB := f.request(s1, "true")
	f.put(trunc.RequestId+escalate.RequestSuffix, truncB[:len(truncB)-10])
	ack, _ := record.Seal(record.KindAck, &lv1.EscalationAck{RequestId: randomID(), Generation: 5}, record.KeySigner(f.sandbox))
	f.put("x"+escalate.RequestSuffix, ack)
	// Links, FIFO, directory, unknown names.
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, truncB, 0o600)
	os.Symlink(secret, filepath.Join(f.reqDir(), "link"+escalate.RequestSuffix))
	unix.Mkfifo(filepath.Join(f.reqDir(), "fifo"+escalate.RequestSuffix), 0o600)
	os.Mkdir(filepath.Join(f.reqDir(), "dir"+escalate.RequestSuffix), 0o700)
	f.put("unknown.kind", []byte("x"))
	f.drained()
	for _, r := range []*lv1.EscalationRequest{req, old, trunc} {
		f.noResultDir(r.RequestId, "refused request")
	}

	// A valid request from a live session without a terminal: denied at
	// once; its replay is refused.
	ok, okB := f.request(s1, "id")
	f.put(ok.RequestId+escalate.RequestSuffix, okB)
	if res := f.result(ok.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED || !strings.Contains(res.Reason, "no terminal") {
		t.Errorf("no-terminal request: %v", res)
	}
	f.put("replay"+escalate.RequestSuffix, okB)
	f.drained()
	// A request of a session that is not attached fails.
	g, gB := f.request(gone, "true")
	f.put(g.RequestId+escalate.RequestSuffix, gB)
	if res := f.result(g.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED {
		t.Errorf("request of a gone session: %v", res)
	}

	// A decision signed by another session's anchor is refused.
	port := f.e.attachTerminal(s1)
	other := f.session(true, false)
	p, pB := f.request(s1, "rm", "-rf", "/")
	f.put(p.RequestId+escalate.RequestSuffix, pB)
	var ask *PromptAsk
	select {
	case ask = <-port.asks:
	case <-time.After(20 * time.Second):
		t.Fatal("no prompt for the session's request")
	}
	if ask.prompt.SessionId != s1 || ask.prompt.RequestId != p.RequestId || strings.Join(ask.prompt.Argv, " ") != "rm -rf /" {
		t.Errorf("prompt: %v", ask.prompt)
	}
	sd, _ := record.SignDecision(&lv1.DeveloperDecision{RequestId: p.RequestId, SessionId: s1, Generation: 5, Decision: lv1.DecisionKind_DECISION_KIND_APPROVE, ApprovedArgv: p.Argv},
		func(n string, b []byte) ([]byte, error) { return f.anchors[other].Sign(n, b), nil })
	ask.answer <- sd
	if res := f.result(p.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED {
		t.Errorf("decision by another anchor: %v", res)
	}

	var refused, executed int
	for _, e := range f.auditEntries() {
		switch e.Event {
		case audit.EventRefused:
			refused++
		case audit.EventExecute:
			executed++
		}
	}
	if refused < 10 || executed != 0 {
		t.Errorf("audit: %d refusals (want ≥ 10), %d executions (want 0)", refused, executed)
	}
}

// TestEscalationFlood: 10,000 forged requests are each refused with bounded
// memory and nothing admitted.
func TestEscalationFlood(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: the flood of forged requests is long; make unit runs it")
	}
	f := newFixture(t, config.Rule{Argv: []string{"true"}})
	s1 := f.session(true, false)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	req, _ := f.request(s1, "true")
	forged, _ := record.Seal(record.KindRequest, req, record.KeySigner(otherKey))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 10000; i++ {
		f.put(randomID()+escalate.RequestSuffix, forged)
	}
	f.drained()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 32<<20 {
		t.Errorf("heap grew by %d bytes after 10,000 refused requests", grow)
	}
	if ents, _ := os.ReadDir(f.resDir()); len(ents) != 0 {
		t.Errorf("%d requests admitted", len(ents))
	}
	f.e.mu.Lock()
	n := len(f.e.seen)
	f.e.mu.Unlock()
	if n != 0 {
		t.Errorf("%d forged IDs remembered", n)
	}
}

// TestEscalationAutoApprovedRunsOnHost: an auto-approved command of a
// session without a terminal runs on the host through the launcher, its
// output is delivered in acknowledged chunks, the result is audited after
// its execution, the model steps are recorded in order, and the result
// directory is removed once the requester acknowledged the result.
func TestEscalationAutoApprovedRunsOnHost(t *testing.T) {
	f := newFixture(t, config.Rule{Match: config.MatchPrefix, Argv: []string{"echo"}})
	s := f.session(true, false)
	req := f.submit(s, "echo", "hello", "host")
	out, _, res := f.collect(req.RequestId)
	if res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED || res.ExitCode != 0 || out != "hello host\n" {
		t.Fatalf("result %v, output %q", res, out)
	}
	if ev, outcome := f.events(req.RequestId); ev != "request,decision,execute,result" || outcome != "completed" {
		t.Errorf("audit %s (%s)", ev, outcome)
	}
	if m := f.model.of(req.RequestId); m != "ReceiveEscalation,AutoApprove,StartHostExecution,CompleteHostExecution,DeliverResult" {
		t.Errorf("model steps %s", m)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(f.resDir(), req.RequestId)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the result directory stayed after the final acknowledgement")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEscalationNoTerminalDenied: a session without a terminal whose
// request no rule approves is denied at once, recorded as the model's
// nearest behaviour (refines=deny-without-terminal).
func TestEscalationNoTerminalDenied(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, false)
	req := f.submit(s, "id")
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED {
		t.Fatalf("result %v", res)
	}
	want := "ReceiveEscalation,QueuePrompt,BeginPrompt[deny-without-terminal],DeveloperDeny[deny-without-terminal],DeliverResult"
	if m := f.model.of(req.RequestId); m != want {
		t.Errorf("model steps %s, want %s", m, want)
	}
}

// TestEscalationCancelKillsHostProcess: the requester's signed
// cancellation kills the running host process's group; the exact process
// is reaped before the cancelled result is written.
func TestEscalationCancelKillsHostProcess(t *testing.T) {
	f := newFixture(t, config.Rule{Match: config.MatchPrefix, Argv: []string{"sleep"}})
	started := make(chan *proc.Child, 1)
	f.e.Hooks.HostStarted = func(_ string, c *proc.Child) { started <- c }
	s := f.session(true, false)
	req := f.submit(s, "sleep", "1000")
	child := waitChild(t, started)
	f.cancel(req.RequestId)
	res := f.result(req.RequestId)
	assertGone(t, child)
	if res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED || res.Signal != int32(unix.SIGKILL) {
		t.Errorf("result %v, want cancelled by SIGKILL", res)
	}
	if m := f.model.of(req.RequestId); m != "ReceiveEscalation,AutoApprove,StartHostExecution,CancelRequest,DeliverResult" {
		t.Errorf("model steps %s", m)
	}
}

// TestEscalationSessionGoneKillsHostProcess: the session's loss (the
// coordinator's DisconnectSession) kills its running host process; the
// worker's later steps are below the model.
func TestEscalationSessionGoneKillsHostProcess(t *testing.T) {
	f := newFixture(t, config.Rule{Match: config.MatchPrefix, Argv: []string{"sleep"}})
	started := make(chan *proc.Child, 1)
	f.e.Hooks.HostStarted = func(_ string, c *proc.Child) { started <- c }
	s := f.session(true, false)
	req := f.submit(s, "sleep", "1000")
	child := waitChild(t, started)
	f.model.Lock()
	f.model.detached["key-"+s] = true // DisconnectSession, under the model lock
	f.model.Unlock()
	f.sessions.remove(s)
	f.e.SessionGone(s)
	res := f.result(req.RequestId)
	assertGone(t, child)
	if res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED || !strings.Contains(res.Reason, "session ended") {
		t.Errorf("result %v, want failed: the session ended", res)
	}
	if m := f.model.of(req.RequestId); m != "ReceiveEscalation,AutoApprove,StartHostExecution" {
		t.Errorf("model steps %s", m)
	}
	// A later request of the gone session is answered, not admitted.
	late := f.submit(s, "sleep", "1")
	if res := f.result(late.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED {
		t.Errorf("request after the session left: %v", res)
	}
}

// TestEscalationCloseEndsHostProcesses (teardown): Close kills and reaps
// every running host process and answers its request before it returns.
func TestEscalationCloseEndsHostProcesses(t *testing.T) {
	f := newFixture(t, config.Rule{Match: config.MatchPrefix, Argv: []string{"sleep"}})
	started := make(chan *proc.Child, 2)
	f.e.Hooks.HostStarted = func(_ string, c *proc.Child) { started <- c }
	a, b := f.session(true, false), f.session(true, false)
	ra, rb := f.submit(a, "sleep", "1000"), f.submit(b, "sleep", "1000")
	c1, c2 := waitChild(t, started), waitChild(t, started)
	f.e.Close()
	for _, c := range []*proc.Child{c1, c2} {
		select {
		case <-c.Done():
		default:
			t.Error("a host process outlived Close")
		}
	}
	for _, id := range []string{ra.RequestId, rb.RequestId} {
		if _, outcome := f.events(id); outcome != "failed" {
			t.Errorf("request %s: result outcome %q after teardown, want failed", id, outcome)
		}
	}
}

// TestEscalationRecoveryDeadGeneration: a coordinator that died leaves its
// generation's mailbox behind (pending requests, published results); the
// next generation removes it before it creates its own, and a request
// signed for the dead generation is refused.
func TestEscalationRecoveryDeadGeneration(t *testing.T) {
	root := t.TempDir()
	dead := newFixtureAt(t, root, 4)
	s := dead.session(true, false)
	stale, staleB := dead.request(s, "id")
	dead.put(stale.RequestId+".pending"+escalate.RequestSuffix, staleB) // never read: the watcher stops below
	leftover := filepath.Join(dead.resDir(), randomID())
	if err := os.Mkdir(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	deadMailbox := filepath.Dir(dead.reqDir())
	// The crash: the watcher stops, nothing is cleaned (Close, the
	// orderly teardown, is never reached).
	close(dead.e.stop)
	<-dead.e.done
	dead.e.mu.Lock()
	dead.e.closed = true
	dead.e.mu.Unlock()

	next := newFixtureAt(t, root, 5)
	if _, err := os.Stat(deadMailbox); !os.IsNotExist(err) {
		t.Fatalf("the dead generation's mailbox %s survived the next generation's start: %v", deadMailbox, err)
	}
	if filepath.Dir(next.reqDir()) == deadMailbox {
		t.Fatal("generations share a mailbox")
	}
	// The dead generation's request, replayed into the new mailbox, is
	// refused (another sandbox key, another generation).
	next.put(stale.RequestId+escalate.RequestSuffix, staleB)
	next.drained()
	next.noResultDir(stale.RequestId, "the dead generation's request")
	// The new generation serves its own sessions.
	s2 := next.session(true, false)
	req := next.submit(s2, "id")
	if res := next.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED {
		t.Errorf("new generation's request: %v", res)
	}
}

func waitChild(t *testing.T, started <-chan *proc.Child) *proc.Child {
	t.Helper()
	select {
	case c := <-started:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the host command did not start")
	}
	return nil
}

// assertGone checks that the exact host process was reaped.
func assertGone(t *testing.T, c *proc.Child) {
	t.Helper()
	select {
	case <-c.Done():
	default:
		t.Error("the result was written before the host process was reaped")
	}
}
