package preparedlower

import (
	"os"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// TestMutationsCaught injects each defect into the reduced configuration and
// requires the expected violation; liveness-only mutants must keep every
// invariant.
func TestMutationsCaught(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: the mutation runs (each a model check) are long; make test-model runs them")
	}
	cases := []struct {
		mut          Mutation
		kind, want   string
		livenessOnly bool
	}{
		{MutReclaimWhileLeased, "invariant", "NoReclaimWhileLeased", false},
		{MutReclaimByPrefix, "invariant", "ForeignTreesPreserved", false},
		{MutRecoverInProgressStage, "invariant", "InProgressPrepareTreesKept", false},
		{MutReleaseLeaseBeforeUnmount, "invariant", "ReleaseAfterUnmount", false},
		{MutStagedSatisfiesReadiness, "invariant", "StagedOwnershipNoDependents", false},
		{MutSupervisorReleasesLease, "invariant", "LeaseHeldRecordMatchesCatalog", false},
		{MutInsertLeaseDropsUnchangedArtifact, "invariant", "LeasedArtifactPublished", false},
		{MutLowerCleanDropsUnchangedLease, "invariant", "LeasedArtifactPublished", false},
		{MutRecoverStageUnfair, "property", "PreparationEventuallyResolves[A1]", true},
		{MutBootstrapUnfair, "property", "ReleaseEventuallyCompletes[", true},
		{MutRemoveLeaseOnlyWhileReclaiming, "property", "ReleaseEventuallyCompletes[", true},
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
			var hit *check.Violation[State]
			for _, v := range res.Violations {
				names = append(names, v.Kind+" "+v.Name)
				if hit == nil && v.Kind == tc.kind && strings.HasPrefix(v.Name, tc.want) {
					hit = v
				}
				if tc.livenessOnly && v.Kind != "property" {
					t.Errorf("liveness-only mutation broke %s %s", v.Kind, v.Name)
				}
			}
			if hit == nil {
				t.Fatalf("want %s %s, got %v", tc.kind, tc.want, names)
			}
			t.Logf("caught by %s %s after %d states; trace of %d states", hit.Kind, hit.Name, res.Distinct, len(hit.Trace))
			if _, err := check.ReplayStates(m.Spec(), hit.Trace); err != nil && tc.livenessOnly {
				t.Fatalf("counterexample is not a behaviour of the mutant: %v", err)
			}
		})
	}
}

// TestSwapCaughtByLeaseInvariant shows that the unmount/lease-release swap
// is also caught by the lease invariant alone: without ReleaseAfterUnmount,
// MountedAnchorLeased (a mounted State Anchor never becomes unleased) fails.
func TestSwapCaughtByLeaseInvariant(t *testing.T) {
	m := New(Reduced())
	m.Mutations = map[Mutation]bool{MutReleaseLeaseBeforeUnmount: true}
	sp := m.Spec()
	var kept []check.Invariant[State]
	for _, inv := range sp.Invariants {
		if inv.Name != "ReleaseAfterUnmount" {
			kept = append(kept, inv)
		}
	}
	sp.Invariants = kept
	v := check.Run(sp, check.Options{}).First()
	if v == nil || v.Name != "MountedAnchorLeased" {
		t.Fatalf("want MountedAnchorLeased, got %+v", v)
	}
	t.Logf("%s", v.String(m.Format))
}
