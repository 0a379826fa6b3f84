package lazaret

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// TestLingerIsAModelBehaviour: a Domain that lingers (stays Ready after
// its last session left, until its linger passes) is a behaviour of the
// model, not an extension of it. In the reduced fixture S1 and S2 both
// belong to D1. The model reaches states where S1 has closed, S2 has not
// arrived yet and D1 is Ready with BeginTeardown(D1) enabled — the point
// where a Domain without linger stops. From there StartReadySession(S2)
// is enabled and keeps D1 Ready (the join a linger exists for), and
// BeginTeardown stays enabled for as long as no session comes, so the
// weak fairness of BeginTeardown, which a linger's bounded wait honours,
// still makes EmptyDomainEventuallyStopsAlways hold (TestModel checks it).
func TestLingerIsAModelBehaviour(t *testing.T) {
	m := New(Reduced())
	spec := m.Spec()
	var lingering []State
	spec.Invariants = []check.Invariant[State]{{Name: "collect", Holds: func(s State) bool {
		if s.SessionPhase[0] == SClosed && s.SessionPhase[1] == SNew && s.DomainPhase[0] == Ready {
			if _, ok := m.BeginTeardown(&s, 0); ok {
				lingering = append(lingering, s)
			}
		}
		return true
	}}}
	spec.Properties = nil
	res := check.Run(spec, check.Options{})
	if !res.Complete {
		t.Fatalf("exploration incomplete: %s", res.Bound)
	}
	if len(lingering) == 0 {
		t.Fatal("no reachable state has D1 Ready with S1 closed, S2 not yet arrived and BeginTeardown(D1) enabled")
	}
	joins := 0
	for _, s := range lingering {
		next, ok := m.StartReadySession(&s, 1)
		if !ok {
			continue
		}
		joins++
		if next.DomainPhase[0] != Ready {
			t.Fatalf("a join of a lingering Domain left it %v", next.DomainPhase[0])
		}
	}
	if joins == 0 {
		t.Fatalf("in none of the %d lingering states can S2 join D1", len(lingering))
	}
	t.Logf("%d reachable lingering states, S2 can join in %d", len(lingering), joins)
}
