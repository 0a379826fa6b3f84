package sessionterm

import (
	"strings"
	"sync"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// fakeRoutes is an escalation side that shows one prompt per value sent on
// asks and ends it on a decision frame; it records its calls in order.
type fakeRoutes struct {
	asks   chan int
	mu     sync.Mutex
	cur    bool
	closed bool
	log    []string
}

func (r *fakeRoutes) note(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *fakeRoutes) calls() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, " ")
}

func (r *fakeRoutes) Channels(route Route, closing bool) RouteChannels[int, int] {
	if r.cur || closing || route != RouteSandbox {
		return RouteChannels[int, int]{}
	}
	return RouteChannels[int, int]{Ask: r.asks}
}

func (r *fakeRoutes) BeginPrompt(t *Terminal, a int) {
	r.cur = true
	r.note("begin")
	t.SetRoute(RoutePrompt)
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPrompt{EscalationPrompt: &lv1.EscalationPrompt{RequestId: "r1"}}})
}
func (r *fakeRoutes) EndPrompt(*Terminal)      {}
func (r *fakeRoutes) StartHost(*Terminal, int) {}
func (r *fakeRoutes) EndHost(*Terminal)        {}
func (r *fakeRoutes) Answer(t *Terminal, f *lv1.ClientFrame, closing bool) bool {
	if f.GetEscalationDecision() == nil {
		return false
	}
	r.note("answer:" + t.RouteName())
	r.cur = false
	t.SetRoute(RouteSandbox)
	return true
}
func (r *fakeRoutes) CancelHost(*Terminal, *lv1.ClientFrame, bool) bool { return false }
func (r *fakeRoutes) Close(t *Terminal) {
	if r.closed {
		return // only the first call acts
	}
	r.closed = true
	r.note("close")
	t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_EscalationPromptEnd{EscalationPromptEnd: &lv1.EscalationPromptEnd{RequestId: "closed"}}})
	if r.cur {
		r.cur = false
		t.SetRoute(RouteSandbox)
	}
}

// TestRunPromptRouteHoldsInput: while a route handler holds the Prompt
// route, typed input never reaches the sandbox; after the decision the
// sandbox route is back. The close handshake runs Close (only its first
// call acts) before the Exit is sent.
func TestRunPromptRouteHoldsInput(t *testing.T) {
	routes := &fakeRoutes{asks: make(chan int)}
	var admittedRoutes []bool
	h := startRunRoutes(t, []string{"sh", "-c", "echo ready; read a; echo got-$a; exec cat"}, func(admitted bool) Routes[int, int] {
		admittedRoutes = append(admittedRoutes, admitted)
		return routes
	})
	if h.next().GetAccepted() == nil {
		t.Fatal("not accepted")
	}
	h.output("ready")
	routes.asks <- 1 // taken by the loop on the sandbox route
	if p := h.next().GetEscalationPrompt(); p == nil {
		t.Fatal("no prompt frame")
	}
	h.send(stdin("typed-during-prompt\n")) // refused: route Prompt
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_EscalationDecision{EscalationDecision: &lv1.SignedDecision{}}})
	h.send(stdin("after\n"))
	h.output("got-after")
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Interrupt{Interrupt: &lv1.Interrupt{}}})
	for closed := false; ; {
		fr := h.next()
		if fr.GetEscalationPromptEnd().GetRequestId() == "closed" {
			closed = true
		}
		if fr.GetExit() != nil {
			if !closed {
				t.Fatal("Exit sent before the routes were closed")
			}
			break
		}
	}
	h.wait()
	if got := routes.calls(); got != "begin answer:prompt close" {
		t.Fatalf("route calls %q", got)
	}
	if len(admittedRoutes) != 1 || !admittedRoutes[0] {
		t.Fatalf("routes registered %v, want once, admitted", admittedRoutes)
	}
	if got := h.rec.trail(); got != "Intent Staged Running ReleaseIntent Clean" {
		t.Fatalf("records %q", got)
	}
}
