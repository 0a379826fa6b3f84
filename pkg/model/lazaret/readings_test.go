package lazaret

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// Reading R1 (tla/README.md): in PublishedDomainsReady the flattened
// "/\ RuntimeSupervisorAlive(d) \/ runtimeSupervisorProc[d] = "Stopped""
// is one conjunct, a nested disjunction. The strict alternative (the
// supervisor must be Alive) is violated by the model's own
// StopRuntimeSupervisorProcess on a published domain, which the module
// deliberately allows (a stopped process is a modeled stuck state).
func TestReadingR1StrictAlternativeFails(t *testing.T) {
	m := New(Fixture())
	sp := m.Spec()
	sp.Invariants = []check.Invariant[State]{{Name: "PublishedDomainsReadyStrict", Holds: func(s State) bool {
		for d := range m.C.Domains {
			if has(s.Published, d) && !RuntimeSupervisorAlive(&s, d) {
				return false
			}
		}
		return true
	}}}
	v := check.Run(sp, check.Options{}).First()
	if v == nil || v.Actions[len(v.Actions)-1] != "StopRuntimeSupervisorProcess(D1)" {
		t.Fatalf("strict reading: want a violation by StopRuntimeSupervisorProcess, got %+v", v)
	}
}

// The other syntactic alternative, where the \/ splits the whole list into
// (Ready /\ HCPresent /\ RSAlive) \/ (RSStopped /\ Mounted /\ ... /\ Held),
// would drop the mount, sidecar, sandbox, trust and lease requirements from
// every published domain whose supervisor is alive; the chosen reading
// implies it, and both hold in the fixture.
func TestReadingR1SplitAlternativeIsWeaker(t *testing.T) {
	m := New(Fixture())
	sp := m.Spec()
	split := func(s State) bool {
		for d := range m.C.Domains {
			if !has(s.Published, d) {
				continue
			}
			a := s.DomainPhase[d] == Ready && HostCoordinatorPresent(&s, d) && RuntimeSupervisorAlive(&s, d)
			b := s.RuntimeSupervisorProc[d] == ProcStopped && s.StateAnchorState[d] == Mounted &&
				s.SidecarState[d] == ResReady && s.SandboxState[d] == ResReady && s.TrustReady[d] &&
				s.SupervisorLease[d] == LeaseHeld
			if !(a || b) {
				return false
			}
		}
		return true
	}
	sp.Invariants = []check.Invariant[State]{
		{Name: "Split", Holds: split},
		{Name: "ChosenImpliesSplit", Holds: func(s State) bool { return !m.PublishedDomainsReady(&s) || split(s) }},
	}
	if v := check.Run(sp, check.Options{}).First(); v != nil {
		t.Fatalf("unexpected: %s", v.String(m.Format))
	}
}
