package preparedlower

import (
	"os"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// tooth pairs a property of tla/PreparedLower.cfg with a seeded defect of
// the actions that it catches when it is checked alone.
type tooth struct {
	prop string
	muts []Mutation
}

// teeth has at least one entry per invariant and liveness property.
var teeth = []tooth{
	{"TypeOK", []Mutation{MutFaultBudgetUnchecked}},
	{"NoReclaimWhileLeased", []Mutation{MutReclaimWhileLeased}},
	{"LeasedArtifactPublished", []Mutation{MutInsertLeaseDropsUnchangedArtifact}},
	{"LeasedArtifactPublished", []Mutation{MutLowerCleanDropsUnchangedLease}},
	{"PublishedArtifactTreePresent", []Mutation{MutPublishWithoutRename}},
	{"ForeignTreesPreserved", []Mutation{MutReclaimByPrefix}},
	{"InProgressPrepareTreesKept", []Mutation{MutRecoverInProgressStage}},
	{"StageTreesBackedByIntent", []Mutation{MutRecoverStageKeepsTree}},
	{"MountedAnchorLeased", []Mutation{MutReleaseLeaseBeforeUnmount}},
	{"LeaseHeldRecordMatchesCatalog", []Mutation{MutSupervisorReleasesLease}},
	{"CatalogLeaseHasDomainRecord", []Mutation{MutLowerCleanWhileLeased}},
	{"AnchorRequiresLease", []Mutation{MutAnchorBeforeLease}},
	{"ReleaseAfterUnmount", []Mutation{MutReleaseLeaseBeforeUnmount}},
	{"StagedOwnershipNoDependents", []Mutation{MutStagedSatisfiesReadiness}},
	{"PublishedGenerationReady", []Mutation{MutRsLossKeepsPhase}},
	{"SupervisorOwned", []Mutation{MutSpawnWithoutSlot}},
	{"RecoveryAfterRuntimeAbsent", []Mutation{MutBootstrapWhileRsAlive}},
	{"DoneIsClean", []Mutation{MutFinishWithLeasedLower}},

	{"ReleaseEventuallyCompletes", []Mutation{MutBootstrapUnfair}},
	{"ReleaseEventuallyCompletes", []Mutation{MutRemoveLeaseOnlyWhileReclaiming}},
	{"StartEventuallyResolves", []Mutation{MutPublishGenerationUnfair}},
	{"LeaseIntentEventuallyResolves", []Mutation{MutCommitLeaseHeldUnfair}},
	{"PreparationEventuallyResolves", []Mutation{MutRecoverStageUnfair}},
	{"ReclaimEventuallyCompletes", []Mutation{MutReclaimArtifactUnfair}},
}

// TestEveryPropertyHasTeeth requires, for every invariant and property that
// tla/PreparedLower.cfg lists, a seeded defect that the property catches
// when checked alone, with a counterexample that replays through the
// defective model. A listed property without an entry in teeth fails.
func TestEveryPropertyHasTeeth(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: the teeth runs (a model check per property) are long; make test-model runs them")
	}
	cfg, err := os.ReadFile("../../../tla/PreparedLower.cfg")
	if err != nil {
		t.Fatal(err)
	}
	names := append(check.CfgSection(cfg, "INVARIANTS"), check.CfgSection(cfg, "PROPERTIES")...)
	if len(names) == 0 {
		t.Fatal("tla/PreparedLower.cfg lists no INVARIANTS or PROPERTIES")
	}
	listed := map[string]bool{}
	for _, name := range names {
		listed[name] = true
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, th := range teeth {
				if th.prop == name {
					n++
					checkTooth(t, th)
				}
			}
			if n == 0 {
				t.Fatalf("%s has no seeded defect that violates it: add a mutation of the actions to mutations.go and an entry to teeth", name)
			}
		})
	}
	for _, th := range teeth {
		if !listed[th.prop] {
			t.Errorf("teeth entry for %s, which tla/PreparedLower.cfg does not list", th.prop)
		}
	}
}

func checkTooth(t *testing.T, th tooth) {
	t.Helper()
	m := New(Reduced())
	m.Mutations = map[Mutation]bool{}
	for _, x := range th.muts {
		m.Mutations[x] = true
	}
	sp, kind, ok := check.Only(m.Spec(), th.prop)
	if !ok {
		t.Fatalf("the transcription has no property %s", th.prop)
	}
	res := check.Run(sp, check.Options{Liveness: true, MaxStates: 1_000_000, MaxHeapBytes: 2 << 30})
	v := res.First()
	if v == nil {
		t.Fatalf("%v: %s not violated (%d states, complete %v)", th.muts, th.prop, res.Distinct, res.Complete)
	}
	if err := check.Confirm(sp, kind, v, m.Format); err != nil {
		t.Fatalf("%v: %s: %v", th.muts, th.prop, err)
	}
	t.Logf("%v: %s %s violated after %d states; counterexample of %d states", th.muts, v.Kind, v.Name, res.Distinct, len(v.Trace))
}
