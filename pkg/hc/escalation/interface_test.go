package escalation

import (
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/escalate"
)

// The escalation role takes no Runtime Supervisor message: its input is
// the sandbox's mailbox records and the session terminal's frames (a
// network ask reaches it through the coordinator as a prompt, Ask). It
// keeps no Domain Store record; a dead generation's mailbox is removed by
// the next generation (TestEscalationRecoveryDeadGeneration). These tests
// drive it through those interfaces.

// TestEscalationOutOfStateFrames: a developer decision while no prompt is
// shown and a HostProcessCancel while no host process runs are taken by
// the routing and dropped: the route does not change and nothing is sent
// to the client. The request the early decision named, submitted later,
// is prompted and decided by the decision given at its prompt, not the
// early one.
func TestEscalationOutOfStateFrames(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, true)
	l := f.serve(s)
	req, b := f.request(s, "touch", "x")
	l.send(f.decision(s, req, lv1.DecisionKind_DECISION_KIND_APPROVE))
	l.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: req.RequestId}}})
	// The loop takes a frame only after it handled the previous one.
	l.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_HostProcessCancel{HostProcessCancel: &lv1.HostProcessCancel{RequestId: randomID()}}})
	if h := l.term.history(); h != "" {
		t.Fatalf("out-of-state frames changed the route: %s", h)
	}
	if n := len(l.term.frames); n != 0 {
		t.Fatalf("out-of-state frames sent %d frames to the client", n)
	}
	f.put(req.RequestId+escalate.RequestSuffix, b)
	if p := l.next().GetEscalationPrompt(); p == nil || p.RequestId != req.RequestId {
		t.Fatalf("expected the request's prompt, got %v", p)
	}
	l.send(f.decision(s, req, lv1.DecisionKind_DECISION_KIND_DENY))
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED {
		t.Fatalf("result %v: the early approval was kept", res)
	}
	if ev, _ := f.events(req.RequestId); strings.Contains(ev, audit.EventExecute) {
		t.Fatalf("audit %s: the request executed", ev)
	}
	if h := l.term.history(); h != "prompt,sandbox" {
		t.Fatalf("routes %s", h)
	}
}

// TestEscalationNewerRecordRefused: records of a newer envelope version
// (another magic) or of a record kind this build does not know, under a
// request's name, are refused and audited, never admitted; a cancellation
// and an acknowledgement naming no active request change nothing; the
// session's next request is served.
func TestEscalationNewerRecordRefused(t *testing.T) {
	f := newFixture(t)
	s := f.session(true, false)
	newer, nb := f.request(s, "id")
	nb = append([]byte("LZE2"), nb[4:]...)
	f.put(newer.RequestId+escalate.RequestSuffix, nb)
	kind, kb := f.request(s, "id")
	kb = append([]byte(nil), kb...)
	kb[4] = 7
	f.put(kind.RequestId+escalate.RequestSuffix, kb)
	f.cancel(randomID())
	f.ack(randomID(), 3, true)
	want := map[string]bool{"bad header": false, "unknown record kind 7": false}
	for deadline := time.Now().Add(30 * time.Second); ; {
		for _, e := range f.auditEntries() {
			for w := range want {
				if e.Event == audit.EventRefused && strings.Contains(e.Reason, w) {
					want[w] = true
				}
			}
		}
		if want["bad header"] && want["unknown record kind 7"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals audited: %v", want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.noResultDir(newer.RequestId, "a newer envelope")
	f.noResultDir(kind.RequestId, "an unknown record kind")
	req := f.submit(s, "id")
	if res := f.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED || !strings.Contains(res.Reason, "no terminal") {
		t.Fatalf("the session's next request: %v", res)
	}
}
