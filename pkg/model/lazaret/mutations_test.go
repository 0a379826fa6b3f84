package lazaret

import (
	"os"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// TestMutationsCaught injects each defect into the reduced configuration and
// requires the checker to report the expected violation (the checker's
// teeth). Liveness-only mutants must keep every invariant and fail only the
// named liveness property.
func TestMutationsCaught(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: the mutation runs (each a model check) are long; make test-model runs them")
	}
	cases := []struct {
		mut          Mutation
		kind         string // "invariant" or "property"
		want         string // violated invariant or property (prefix)
		livenessOnly bool
	}{
		{MutSandboxWithoutNetworkReadiness, "invariant", "OrderedNetworkStartup", false},
		{MutHostExecutionWithoutApproval, "invariant", "HostExecutionAuthorized", false},
		{MutReceiveUnmatchedIdentity, "invariant", "AuthenticatedRequestsOnly", false},
		{MutSwapStopSandboxSidecar, "invariant", "OrderedNetworkStartup", false},
		{MutStartSandboxWithoutIntent, "invariant", "DurableIntentBeforeSandboxReady", false},
		{MutHcLossKeepsLeaseHeld, "invariant", "SupervisorLeaseConsistency", false},
		{MutStopHcDropsUnchangedPublished, "invariant", "PublishedDomainsReady", false},
		{MutDeliverDropsUnchangedHostRunning, "invariant", "HostExecutionAuthorized", false},
		{MutBeginRecoveryUnfair, "property", "FailedDomainEventuallyRecovers[D1]", true},
		{MutRegisterSessionUnfair, "property", "SessionEventuallyResolves[", true},
		{MutDeliverOnlyWhenDisconnected, "property", "RequestEventuallyResolves[", true},
		{MutDenyKeepsPromptRoute, "property", "PromptEventuallyRestoresTerminal[S2]", true},
		{MutNoTeardown, "property", "EmptyDomainEventuallyStopsAlways[D1]", true},
	}
	for _, tc := range cases {
		t.Run(string(tc.mut), func(t *testing.T) {
			m := New(Reduced())
			m.Mutations = map[Mutation]bool{tc.mut: true}
			res := check.Run(m.Spec(), check.Options{Liveness: true})
			if !res.Violated() {
				t.Fatalf("mutation not caught: %d states explored, no violation", res.Distinct)
			}
			var names []string
			found := false
			for _, v := range res.Violations {
				names = append(names, v.Kind+" "+v.Name)
				if v.Kind == tc.kind && strings.HasPrefix(v.Name, tc.want) {
					found = true
					t.Logf("caught by %s %s after %d states; trace of %d states", v.Kind, v.Name, res.Distinct, len(v.Trace))
				}
				if tc.livenessOnly && v.Kind != "property" {
					t.Errorf("liveness-only mutation broke %s %s", v.Kind, v.Name)
				}
			}
			if !found {
				t.Fatalf("want %s %s, got %v", tc.kind, tc.want, names)
			}
			if tc.livenessOnly {
				for _, v := range res.Violations {
					if strings.HasPrefix(v.Name, tc.want) {
						checkLasso(t, m, v)
						break
					}
				}
			}
		})
	}
}

// checkLasso replays a liveness counterexample through Next: its prefix
// must be a behaviour and its cycle must return to the loop state.
func checkLasso(t *testing.T, m *Model, v *check.Violation[State]) {
	t.Helper()
	sp := m.Spec()
	if _, err := check.ReplayStates(sp, v.Trace); err != nil {
		t.Fatalf("counterexample is not a behaviour of the mutant: %v", err)
	}
	if !v.Stutter && v.Loop >= 0 {
		last := v.Trace[len(v.Trace)-1]
		if m.Format(last) != m.Format(v.Trace[v.Loop]) {
			t.Fatalf("lasso does not close: last state differs from loop state %d", v.Loop)
		}
	}
}

// TestSeedEmptyDomainPropertyIsVacuous documents reading R6: as written in
// the seed, EmptyDomainEventuallyStops holds in the initial state (domain
// Absent), so it cannot catch MutNoTeardown; the strengthened property does.
func TestSeedEmptyDomainPropertyIsVacuous(t *testing.T) {
	m := New(Reduced())
	m.Mutations = map[Mutation]bool{MutNoTeardown: true}
	res := check.Run(m.Spec(), check.Options{Liveness: true})
	for _, v := range res.Violations {
		if strings.HasPrefix(v.Name, "EmptyDomainEventuallyStops[") {
			t.Fatalf("seed form unexpectedly violated: %s", v.String(m.Format))
		}
	}
}
