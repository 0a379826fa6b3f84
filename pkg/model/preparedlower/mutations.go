package preparedlower

// Mutation names a deliberate defect injected by tests to prove the checker
// catches it. The default model has none.
type Mutation string

const (
	// MutReclaimWhileLeased removes lease[a] = {} from BeginReclaim and
	// ReclaimArtifact.
	MutReclaimWhileLeased Mutation = "BeginReclaim, ReclaimArtifact: remove guard lease[a] = {}"
	// MutReclaimByPrefix makes ReclaimArtifact delete every tree under the
	// artifact's prefix, including a foreign tree.
	MutReclaimByPrefix Mutation = "ReclaimArtifact: delete by prefix (foreign tree too)"
	// MutRecoverInProgressStage removes preparer[a] = "Crashed" from
	// RecoverStage, so stage recovery may delete an in-progress tree.
	MutRecoverInProgressStage Mutation = "RecoverStage: remove guard preparer[a] = \"Crashed\""
	// MutReleaseLeaseBeforeUnmount swaps the unmount and the lease release:
	// AnchorClean and RemoveLease no longer wait for mount absence.
	MutReleaseLeaseBeforeUnmount Mutation = "swap UnmountAnchor and AnchorClean/RemoveLease"
	// MutStagedSatisfiesReadiness removes rsSlot[g] = "Committed" from
	// MountAnchor and PublishGeneration.
	MutStagedSatisfiesReadiness Mutation = "MountAnchor, PublishGeneration: remove guard rsSlot[g] = \"Committed\""
	// MutSupervisorReleasesLease makes the surviving supervisor remove the
	// catalog lease in LeaseLossUnmount (HC-loss split violated).
	MutSupervisorReleasesLease Mutation = "LeaseLossUnmount: supervisor also removes the catalog lease"
	// MutInsertLeaseDropsUnchangedArtifact drops artifact from the UNCHANGED
	// list of InsertLease.
	MutInsertLeaseDropsUnchangedArtifact Mutation = "InsertLease: drop artifact from UNCHANGED"
	// MutLowerCleanDropsUnchangedLease drops lease from the UNCHANGED list of
	// LowerClean.
	MutLowerCleanDropsUnchangedLease Mutation = "LowerClean: drop lease from UNCHANGED"

	// Liveness-only mutations.

	// MutRecoverStageUnfair removes RecoverStage from PreparationProgress.
	MutRecoverStageUnfair Mutation = "RecoverStage not weakly fair"
	// MutBootstrapUnfair removes BootstrapRecoveryCoordinator from
	// GenerationProgress.
	MutBootstrapUnfair Mutation = "BootstrapRecoveryCoordinator not weakly fair"
	// MutRemoveLeaseOnlyWhileReclaiming adds a wrong guard to RemoveLease
	// (artifact[A(g)] = "Reclaiming"), which can never hold while leased.
	MutRemoveLeaseOnlyWhileReclaiming Mutation = "RemoveLease: wrong guard artifact[A(g)] = \"Reclaiming\""
)

// Mutations that give each remaining property a defect of the actions that
// only it names; TestEveryPropertyHasTeeth pairs each property with one.
const (
	// MutFaultBudgetUnchecked drops the guard faults > 0 of PreparerCrash:
	// the fault budget is decremented past zero.
	MutFaultBudgetUnchecked Mutation = "PreparerCrash: remove guard faults > 0"
	// MutPublishWithoutRename commits the catalog row Published without
	// renaming the stage tree to the published tree.
	MutPublishWithoutRename Mutation = "PublishArtifact: trees UNCHANGED"
	// MutRecoverStageKeepsTree resets the catalog row of an abandoned
	// preparation without deleting its stage tree.
	MutRecoverStageKeepsTree Mutation = "RecoverStage: trees UNCHANGED"
	// MutLowerCleanWhileLeased marks the prepared_lower participant Clean
	// while the catalog lease still exists (removes g \notin lease[A(g)]).
	MutLowerCleanWhileLeased Mutation = "LowerClean: remove guard g \\notin lease[A(g)]"
	// MutAnchorBeforeLease records State Anchor intent before the lease is
	// held (removes lower[g] = "LeaseHeld" from AnchorIntent).
	MutAnchorBeforeLease Mutation = "AnchorIntent: remove guard lower[g] = \"LeaseHeld\""
	// MutRsLossKeepsPhase: a supervisor crash does not fail the generation.
	MutRsLossKeepsPhase Mutation = "HardLoseSupervisor: phase UNCHANGED instead of Failed"
	// MutSpawnWithoutSlot spawns the supervisor without staging its
	// ownership slot.
	MutSpawnWithoutSlot Mutation = "SpawnSupervisor: rsSlot UNCHANGED instead of Staged"
	// MutBootstrapWhileRsAlive bootstraps a recovery coordinator while the
	// surviving supervisor still runs (removes RuntimeAbsent(g)).
	MutBootstrapWhileRsAlive Mutation = "BootstrapRecoveryCoordinator: remove guard RuntimeAbsent(g)"
	// MutFinishWithLeasedLower finishes a generation whose prepared_lower
	// participant is not clean (removes lower[g] \in {"None", "Clean"}).
	MutFinishWithLeasedLower Mutation = "FinishGeneration: remove guard lower[g] \\in {\"None\", \"Clean\"}"

	// Liveness-only mutations.

	// MutPublishGenerationUnfair removes PublishGeneration from
	// GenerationProgress.
	MutPublishGenerationUnfair Mutation = "PublishGeneration not weakly fair"
	// MutCommitLeaseHeldUnfair removes CommitLeaseHeld from
	// GenerationProgress.
	MutCommitLeaseHeldUnfair Mutation = "CommitLeaseHeld not weakly fair"
	// MutReclaimArtifactUnfair removes ReclaimArtifact from
	// PreparationProgress.
	MutReclaimArtifactUnfair Mutation = "ReclaimArtifact not weakly fair"
)

func (m *Model) unfair(name string) bool {
	return (name == "RecoverStage" && m.mut(MutRecoverStageUnfair)) ||
		(name == "BootstrapRecoveryCoordinator" && m.mut(MutBootstrapUnfair)) ||
		(name == "PublishGeneration" && m.mut(MutPublishGenerationUnfair)) ||
		(name == "CommitLeaseHeld" && m.mut(MutCommitLeaseHeldUnfair)) ||
		(name == "ReclaimArtifact" && m.mut(MutReclaimArtifactUnfair))
}

// havoc returns, for an action instance whose UNCHANGED list a mutation
// shortened, a function yielding every value of the freed variable.
func (m *Model) havoc(instance string) func(t State, yield func(State)) {
	has := func(prefix string) bool { return len(instance) > len(prefix) && instance[:len(prefix)+1] == prefix+"(" }
	switch {
	case has("InsertLease") && m.mut(MutInsertLeaseDropsUnchangedArtifact):
		return func(t State, yield func(State)) {
			for a := range m.C.Artifacts {
				for v := ArtAbsent; v <= ArtReclaiming; v++ {
					u := t
					u.Artifact[a] = v
					yield(u)
				}
			}
		}
	case has("LowerClean") && m.mut(MutLowerCleanDropsUnchangedLease):
		return func(t State, yield func(State)) {
			for a := range m.C.Artifacts {
				for set := 0; set < 1<<uint(len(m.C.Generations)); set++ {
					u := t
					u.Lease[a] = uint8(set)
					yield(u)
				}
			}
		}
	}
	return nil
}
