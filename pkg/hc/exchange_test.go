package hc

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisor"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
)

// TestSupervisorProtocolTable checks every phase × message kind against
// the RS send order written out independently here: accepted with the
// stated next phase, or refused as ErrCorrupt naming phase and message.
func TestSupervisorProtocolTable(t *testing.T) {
	P, L, A, S, R, F, D := phaseHello, phaseLower, phaseAnchors, phaseStaging, phaseRunning, phaseFailed, phaseDone
	const x = supervisorPhase(-1) // refused
	phases := []supervisorPhase{P, L, A, S, R, F, D}
	// Columns: hello, lower, anchors, staging, running, failed, done.
	want := map[supervisorKind][7]supervisorPhase{
		kindUnknown:        {x, x, x, x, x, x, x},
		kindHello:          {L, x, x, x, x, x, x},
		kindProgress:       {x, L, A, S, R, F, x},
		kindArtifact:       {x, A, x, x, x, x, x},
		kindAnchorsMounted: {x, x, S, x, x, x, x},
		kindStagedRouting:  {x, L, A, S, x, x, x},
		kindStagedEgress:   {x, x, x, S, x, x, x},
		kindStagedRunsc:    {x, x, x, S, x, x, x},
		kindNetworkAsk:     {x, x, x, S, R, F, x},
		kindReady:          {x, x, x, R, x, x, x},
		kindFailure:        {D, F, F, F, F, F, x},
		kindStopped:        {x, x, x, x, D, D, x},
	}
	if len(want) != int(numSupervisorKinds) {
		t.Fatalf("expectations cover %d kinds, not %d", len(want), numSupervisorKinds)
	}
	if len(supervisorProtocol) != len(phases) {
		t.Fatalf("table has %d phases, want %d", len(supervisorProtocol), len(phases))
	}
	for k := kindUnknown; k < numSupervisorKinds; k++ {
		for i, p := range phases {
			next, err := nextSupervisorPhase(p, k)
			if w := want[k][i]; w != x {
				if err != nil || next != w {
					t.Errorf("%s in phase %s: got %s, %v; want accepted → %s", k, p, next, err, w)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s in phase %s: accepted (→ %s), want refused", k, p, next)
				continue
			}
			if !errors.Is(err, errdefs.ErrCorrupt) {
				t.Errorf("%s in phase %s: error %v is not ErrCorrupt", k, p, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "phase "+p.String()) || !strings.Contains(msg, k.String()) {
				t.Errorf("%s in phase %s: error %q names neither", k, p, msg)
			}
			if next != p {
				t.Errorf("%s in phase %s: refused but moved to %s", k, p, next)
			}
		}
	}
}

func TestSupervisorMessageKind(t *testing.T) {
	staged := func(slot string) *lv1.SupervisorMessage {
		return &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Staged{Staged: &lv1.StagedProcessOwnership{Slot: slot}}}
	}
	for _, c := range []struct {
		m    *lv1.SupervisorMessage
		want supervisorKind
	}{
		{&lv1.SupervisorMessage{}, kindUnknown},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Hello{Hello: &lv1.SupervisorHello{}}}, kindHello},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Progress{Progress: &lv1.Progress{}}}, kindProgress},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Artifact{Artifact: &lv1.ArtifactReady{}}}, kindArtifact},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_AnchorsMounted{AnchorsMounted: &lv1.AnchorsMounted{}}}, kindAnchorsMounted},
		{staged("git_routing"), kindStagedRouting},
		{staged("egress_proxy"), kindStagedEgress},
		{staged("attached_runsc"), kindStagedRunsc},
		{staged("bogus"), kindStagedRunsc}, // refused by commitStaged, in staging only
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_NetworkAsk{NetworkAsk: &lv1.NetworkAsk{}}}, kindNetworkAsk},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Ready{Ready: &lv1.SandboxReady{}}}, kindReady},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{}}}, kindFailure},
		{&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Stopped{Stopped: &lv1.SupervisorStopped{}}}, kindStopped},
	} {
		if got := supervisorMessageKind(c.m); got != c.want {
			t.Errorf("kind of %v = %s, want %s", c.m, got, c.want)
		}
	}
}

// TestSupervisorProtocolSequences walks RS's real send orders (pkg/rs run,
// launch, serve), including its fault paths, and some it never produces.
func TestSupervisorProtocolSequences(t *testing.T) {
	H, Pr, Ar, An, SG, SE, SR, Ask, Rd, Fl, St := kindHello, kindProgress, kindArtifact, kindAnchorsMounted, kindStagedRouting, kindStagedEgress, kindStagedRunsc, kindNetworkAsk, kindReady, kindFailure, kindStopped
	for _, c := range []struct {
		name string
		seq  []supervisorKind
		ok   bool
	}{
		{"happy path", []supervisorKind{H, Pr, Pr, Ar, An, SR, Rd, St}, true},
		{"git routing after anchors", []supervisorKind{H, Ar, Pr, An, SG, SR, Rd, St}, true},
		{"git routing before the lease", []supervisorKind{H, SG, Pr, Ar, An, SR, Rd, St}, true},
		{"git routing between lease and anchors", []supervisorKind{H, Ar, SG, An, SR, Rd, St}, true},
		{"allowlist: egress then runsc, asks while booting", []supervisorKind{H, Ar, An, SG, SE, SR, Ask, Rd, Ask, St}, true},
		{"failure before the hello", []supervisorKind{Fl}, true},
		{"failure while preparing", []supervisorKind{H, Pr, Fl}, true},
		{"failure while staging", []supervisorKind{H, Ar, An, SG, Fl}, true},
		{"sandbox crash: failure, then stopped", []supervisorKind{H, Ar, An, SR, Rd, Fl, St}, true},
		{"ask racing a failure", []supervisorKind{H, Ar, An, SE, SR, Rd, Fl, Ask, St}, true},
		{"no hello first", []supervisorKind{Ar}, false},
		{"second hello", []supervisorKind{H, H}, false},
		{"anchors before the lease", []supervisorKind{H, An}, false},
		{"runsc staged before the anchors", []supervisorKind{H, Ar, SR}, false},
		{"ready before staging is possible", []supervisorKind{H, Ar, Rd}, false},
		{"stopped before ready", []supervisorKind{H, Ar, An, SR, St}, false},
		{"second ready", []supervisorKind{H, Ar, An, SR, Rd, Rd}, false},
		{"staged after ready", []supervisorKind{H, Ar, An, SR, Rd, SR}, false},
		{"anything after stopped", []supervisorKind{H, Ar, An, SR, Rd, St, Pr}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := phaseHello
			var err error
			for _, k := range c.seq {
				if p, err = nextSupervisorPhase(p, k); err != nil {
					break
				}
			}
			if c.ok && (err != nil || p != phaseDone && c.seq[len(c.seq)-1] == kindStopped) {
				t.Fatalf("refused: %v (phase %s)", err, p)
			}
			if !c.ok && err == nil {
				t.Fatalf("accepted, ending in phase %s", p)
			}
		})
	}
}

// TestSuperviseMessagesRefusesOutOfPhase drives superviseMessages with the
// fake supervisor (a real SEQPACKET pair): a message the hello phase does not accept fails the
// generation as a protocol error; an RS failure first fails it with RS's
// category; a channel closed before the hello fails it naming the hello.
func TestSuperviseMessagesRefusesOutOfPhase(t *testing.T) {
	for _, c := range []struct {
		name  string
		send  *lv1.SupervisorMessage // nil: close the channel
		want  error
		words []string
	}{
		{"artifact first", &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Artifact{Artifact: &lv1.ArtifactReady{}}},
			errdefs.ErrCorrupt, []string{"ArtifactReady in phase hello", "accepted: SupervisorHello, SupervisorFailure"}},
		{"stopped first", &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Stopped{Stopped: &lv1.SupervisorStopped{}}},
			errdefs.ErrCorrupt, []string{"SupervisorStopped in phase hello"}},
		{"failure first", &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "unsupported-host", Message: "no user namespaces"}}},
			errdefs.ErrUnsupportedHost, []string{"no user namespaces"}},
		{"closed before hello", nil, nil, []string{"runtime supervisor hello"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := supervisortest.New(t)
			co := &coordinator{rs: supervisor.OverChannel(rs.HC), log: slog.New(slog.DiscardHandler), st: stateStarting,
				ready: make(chan struct{}), teardownC: make(chan struct{})}
			if c.send != nil {
				rs.Send(c.send)
			} else {
				rs.Close()
			}
			done := make(chan struct{})
			go func() { defer close(done); co.superviseMessages(make(chan error)) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("superviseMessages did not return")
			}
			if co.st != stateFailed {
				t.Fatalf("state %v, want failed", co.st)
			}
			if c.want != nil && !errors.Is(co.failErr, c.want) {
				t.Errorf("error %v is not %v", co.failErr, c.want)
			}
			for _, w := range c.words {
				if !strings.Contains(co.failErr.Error(), w) {
					t.Errorf("error %q lacks %q", co.failErr, w)
				}
			}
		})
	}
}

// TestLeaseArtifact: an ArtifactReady is leased unless it is provisional
// and the Storage Catalog's verdict sent in StartSandbox names another
// artifact (or none); a second provisional one is a protocol error.
func TestLeaseArtifact(t *testing.T) {
	const found, other = "pl-found", "pl-other"
	for _, c := range []struct {
		name            string
		a               *lv1.ArtifactReady
		verdict         string
		provisionalRead bool
		lease           bool
		err             error
	}{
		{"prepared", &lv1.ArtifactReady{PreparedArtifactId: found}, other, false, true, nil},
		{"prepared after a provisional one", &lv1.ArtifactReady{PreparedArtifactId: found}, other, true, true, nil},
		{"provisional, named by the verdict", &lv1.ArtifactReady{PreparedArtifactId: found, Provisional: true}, found, false, true, nil},
		{"provisional, another verdict", &lv1.ArtifactReady{PreparedArtifactId: found, Provisional: true}, other, false, false, nil},
		{"provisional, no verdict", &lv1.ArtifactReady{PreparedArtifactId: found, Provisional: true}, "", false, false, nil},
		{"second provisional", &lv1.ArtifactReady{PreparedArtifactId: found, Provisional: true}, found, true, false, errdefs.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			co := &coordinator{log: slog.New(slog.DiscardHandler), reusableLower: func() string { return c.verdict }}
			lease, err := co.leaseArtifact(c.a, c.provisionalRead)
			if c.err != nil {
				if !errors.Is(err, c.err) || !strings.Contains(err.Error(), "second provisional ArtifactReady") {
					t.Fatalf("err %v, want %v naming the second provisional ArtifactReady", err, c.err)
				}
				return
			}
			if err != nil || lease != c.lease {
				t.Fatalf("lease %v, err %v; want %v", lease, err, c.lease)
			}
		})
	}
}
