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

func (m *Model) unfair(name string) bool {
	return (name == "RecoverStage" && m.mut(MutRecoverStageUnfair)) ||
		(name == "BootstrapRecoveryCoordinator" && m.mut(MutBootstrapUnfair))
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
