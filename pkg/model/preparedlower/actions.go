package preparedlower

// Actions of PreparedLower.tla in module order. Each returns the successor
// (a copy of the state: unassigned variables are UNCHANGED) and whether the
// action is enabled.

// A(g) == GenArtifact[g]
func (m *Model) A(g int) int { return m.C.GenArtifact[g] }

// RuntimeAbsent(g) == rs[g] # "Alive"
func RuntimeAbsent(st *State, g int) bool { return st.Rs[g] != RsAlive }

func inLease(st *State, a, g int) bool { return st.Lease[a]&(1<<uint(g)) != 0 }

// ---------------------------------------------------------------------------
// Preparation and publication

func (m *Model) BeginPrepare(st *State, a int) (State, bool) {
	demand := false
	for g := range m.C.Generations {
		if m.A(g) == a && st.Hc[g] == HcAlive && (st.Lower[g] == PIntent || st.Lower[g] == PNone && st.Phase[g] == Starting) {
			demand = true
		}
	}
	if !(st.Artifact[a] == ArtAbsent && demand) {
		return State{}, false
	}
	t := *st
	t.Artifact[a] = ArtPreparing
	t.Preparer[a] = PrepRunning
	return t, true
}

func (m *Model) CreateStageTree(st *State, a int) (State, bool) {
	if !(st.Preparer[a] == PrepRunning) {
		return State{}, false
	}
	t := *st
	t.Trees = st.Trees | StageTree(a)
	t.Preparer[a] = PrepStaging
	return t, true
}

func (m *Model) PublishArtifact(st *State, a int) (State, bool) {
	if !(st.Artifact[a] == ArtPreparing &&
		st.Preparer[a] == PrepStaging &&
		st.Trees&StageTree(a) != 0) {
		return State{}, false
	}
	t := *st
	if !m.mut(MutPublishWithoutRename) {
		t.Trees = (st.Trees &^ StageTree(a)) | PubTree(a)
	}
	t.Artifact[a] = ArtPublished
	t.Preparer[a] = PrepNone
	return t, true
}

func (m *Model) PreparerCrash(st *State, a int) (State, bool) {
	if !((st.Preparer[a] == PrepRunning || st.Preparer[a] == PrepStaging) &&
		(st.Faults > 0 || m.mut(MutFaultBudgetUnchecked))) {
		return State{}, false
	}
	t := *st
	t.Faults = st.Faults - 1
	t.Preparer[a] = PrepCrashed
	return t, true
}

func (m *Model) RecoverStage(st *State, a int) (State, bool) {
	if !(st.Artifact[a] == ArtPreparing &&
		(st.Preparer[a] == PrepCrashed || m.mut(MutRecoverInProgressStage))) {
		return State{}, false
	}
	t := *st
	if !m.mut(MutRecoverStageKeepsTree) {
		t.Trees = st.Trees &^ StageTree(a)
	}
	t.Artifact[a] = ArtAbsent
	if st.Preparer[a] == PrepCrashed {
		t.Preparer[a] = PrepNone
	}
	return t, true
}

func (m *Model) BeginReclaim(st *State, a int) (State, bool) {
	if !(st.Artifact[a] == ArtPublished &&
		(st.Lease[a] == 0 || m.mut(MutReclaimWhileLeased)) &&
		st.Reclaims > 0) {
		return State{}, false
	}
	t := *st
	t.Reclaims = st.Reclaims - 1
	t.Artifact[a] = ArtReclaiming
	return t, true
}

func (m *Model) ReclaimArtifact(st *State, a int) (State, bool) {
	if !(st.Artifact[a] == ArtReclaiming &&
		(st.Lease[a] == 0 || m.mut(MutReclaimWhileLeased))) {
		return State{}, false
	}
	t := *st
	t.Trees = st.Trees &^ PubTree(a)
	if m.mut(MutReclaimByPrefix) {
		t.Trees &^= Foreign
	}
	t.Artifact[a] = ArtAbsent
	return t, true
}

func (m *Model) RollbackReclaim(st *State, a int) (State, bool) {
	if !(st.Artifact[a] == ArtReclaiming &&
		st.Lease[a] == 0 &&
		st.Trees&PubTree(a) != 0) {
		return State{}, false
	}
	t := *st
	t.Artifact[a] = ArtPublished
	return t, true
}

// ---------------------------------------------------------------------------
// Lease acquisition, supervisor acquisition, mount and publication

func (m *Model) AcquireLeaseIntent(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Lower[g] == PNone) {
		return State{}, false
	}
	t := *st
	t.Lower[g] = PIntent
	return t, true
}

func (m *Model) InsertLease(st *State, g int) (State, bool) {
	a := m.A(g)
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Lower[g] == PIntent &&
		st.Artifact[a] == ArtPublished &&
		!inLease(st, a, g)) {
		return State{}, false
	}
	t := *st
	t.Lease[a] = st.Lease[a] | 1<<uint(g)
	return t, true
}

func (m *Model) CommitLeaseHeld(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Lower[g] == PIntent &&
		inLease(st, m.A(g), g)) {
		return State{}, false
	}
	t := *st
	t.Lower[g] = PActive
	return t, true
}

func (m *Model) SpawnSupervisor(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Rs[g] == RsAbsent &&
		st.RsSlot[g] == Unassigned) {
		return State{}, false
	}
	t := *st
	t.Rs[g] = RsAlive
	if !m.mut(MutSpawnWithoutSlot) {
		t.RsSlot[g] = Staged
	}
	return t, true
}

func (m *Model) CommitSupervisor(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Rs[g] == RsAlive &&
		st.RsSlot[g] == Staged) {
		return State{}, false
	}
	t := *st
	t.RsSlot[g] = Committed
	return t, true
}

func (m *Model) AnchorIntent(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		(st.Lower[g] == PActive || m.mut(MutAnchorBeforeLease)) &&
		st.Anchor[g] == PNone) {
		return State{}, false
	}
	t := *st
	t.Anchor[g] = PIntent
	return t, true
}

func (m *Model) MountAnchor(st *State, g int) (State, bool) {
	a := m.A(g)
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Anchor[g] == PIntent &&
		st.Lower[g] == PActive &&
		inLease(st, a, g) &&
		st.Trees&PubTree(a) != 0 &&
		st.Rs[g] == RsAlive &&
		(st.RsSlot[g] == Committed || m.mut(MutStagedSatisfiesReadiness)) &&
		st.Mount[g] == MountAbsent) {
		return State{}, false
	}
	t := *st
	t.Mount[g] = Mounted
	return t, true
}

func (m *Model) CommitAnchorPrepared(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Anchor[g] == PIntent &&
		st.Mount[g] == Mounted) {
		return State{}, false
	}
	t := *st
	t.Anchor[g] = PActive
	return t, true
}

func (m *Model) PublishGeneration(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Starting &&
		st.Hc[g] == HcAlive &&
		st.Lower[g] == PActive &&
		st.Anchor[g] == PActive &&
		st.Mount[g] == Mounted &&
		st.Rs[g] == RsAlive &&
		(st.RsSlot[g] == Committed || m.mut(MutStagedSatisfiesReadiness))) {
		return State{}, false
	}
	t := *st
	t.Phase[g] = Ready
	return t, true
}

// ---------------------------------------------------------------------------
// Normal release

func (m *Model) BeginRelease(st *State, g int) (State, bool) {
	if !((st.Phase[g] == Starting || st.Phase[g] == Ready) &&
		st.Hc[g] == HcAlive) {
		return State{}, false
	}
	t := *st
	t.Phase[g] = Stopping
	return t, true
}

func releasing(p uint8) bool { return p == Stopping || p == Recovering }

func (m *Model) AnchorReleaseIntent(st *State, g int) (State, bool) {
	if !(releasing(st.Phase[g]) &&
		st.Hc[g] == HcAlive &&
		(st.Anchor[g] == PIntent || st.Anchor[g] == PActive)) {
		return State{}, false
	}
	t := *st
	t.Anchor[g] = PReleaseIntent
	return t, true
}

func (m *Model) UnmountAnchor(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Stopping &&
		st.Hc[g] == HcAlive &&
		st.Anchor[g] == PReleaseIntent &&
		st.Rs[g] == RsAlive &&
		st.Mount[g] == Mounted) {
		return State{}, false
	}
	t := *st
	t.Mount[g] = MountAbsent
	return t, true
}

func (m *Model) AnchorClean(st *State, g int) (State, bool) {
	if !(releasing(st.Phase[g]) &&
		st.Hc[g] == HcAlive &&
		st.Anchor[g] == PReleaseIntent &&
		(st.Mount[g] == MountAbsent || m.mut(MutReleaseLeaseBeforeUnmount)) &&
		st.Lower[g] == PActive) {
		return State{}, false
	}
	t := *st
	t.Anchor[g] = PClean
	t.Lower[g] = PReleaseIntent
	return t, true
}

func (m *Model) ReleaseUnanchoredLower(st *State, g int) (State, bool) {
	if !(releasing(st.Phase[g]) &&
		st.Hc[g] == HcAlive &&
		st.Anchor[g] == PNone &&
		(st.Lower[g] == PIntent || st.Lower[g] == PActive) &&
		st.Mount[g] == MountAbsent) {
		return State{}, false
	}
	t := *st
	t.Anchor[g] = PClean
	t.Lower[g] = PReleaseIntent
	return t, true
}

func (m *Model) RemoveLease(st *State, g int) (State, bool) {
	a := m.A(g)
	if !(st.Hc[g] == HcAlive &&
		st.Lower[g] == PReleaseIntent &&
		(st.Mount[g] == MountAbsent || m.mut(MutReleaseLeaseBeforeUnmount)) &&
		inLease(st, a, g) &&
		(!m.mut(MutRemoveLeaseOnlyWhileReclaiming) || st.Artifact[a] == ArtReclaiming)) {
		return State{}, false
	}
	t := *st
	t.Lease[a] = st.Lease[a] &^ (1 << uint(g))
	return t, true
}

func (m *Model) LowerClean(st *State, g int) (State, bool) {
	if !(st.Hc[g] == HcAlive &&
		st.Lower[g] == PReleaseIntent &&
		(!inLease(st, m.A(g), g) || m.mut(MutLowerCleanWhileLeased))) {
		return State{}, false
	}
	t := *st
	t.Lower[g] = PClean
	return t, true
}

func (m *Model) StopSupervisor(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Stopping &&
		st.Hc[g] == HcAlive &&
		st.Rs[g] == RsAlive &&
		st.Mount[g] == MountAbsent) {
		return State{}, false
	}
	t := *st
	t.Rs[g] = RsDead
	return t, true
}

func (m *Model) ClearSupervisorSlot(st *State, g int) (State, bool) {
	if !(releasing(st.Phase[g]) &&
		st.Hc[g] == HcAlive &&
		st.Rs[g] != RsAlive &&
		st.RsSlot[g] != Unassigned) {
		return State{}, false
	}
	t := *st
	t.RsSlot[g] = Unassigned
	return t, true
}

func (m *Model) FinishGeneration(st *State, g int) (State, bool) {
	if !(releasing(st.Phase[g]) &&
		st.Hc[g] == HcAlive &&
		(st.Lower[g] == PNone || st.Lower[g] == PClean || m.mut(MutFinishWithLeasedLower)) &&
		(st.Anchor[g] == PNone || st.Anchor[g] == PClean) &&
		st.Mount[g] == MountAbsent &&
		RuntimeAbsent(st, g) &&
		st.RsSlot[g] == Unassigned) {
		return State{}, false
	}
	t := *st
	t.Phase[g] = Done
	return t, true
}

// ---------------------------------------------------------------------------
// Host Coordinator loss split, supervisor loss, and recovery

func (m *Model) HardLoseHostCoordinator(st *State, g int) (State, bool) {
	p := st.Phase[g]
	if !((p == Starting || p == Ready || p == Stopping) &&
		st.Hc[g] == HcAlive &&
		st.Faults > 0) {
		return State{}, false
	}
	t := *st
	t.Faults = st.Faults - 1
	t.Hc[g] = HcDead
	t.Phase[g] = Failed
	return t, true
}

func (m *Model) LeaseLossUnmount(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Failed &&
		st.Hc[g] == HcDead &&
		st.Rs[g] == RsAlive &&
		st.Mount[g] == Mounted) {
		return State{}, false
	}
	t := *st
	t.Mount[g] = MountAbsent
	if m.mut(MutSupervisorReleasesLease) {
		t.Lease[m.A(g)] &^= 1 << uint(g)
	}
	return t, true
}

func (m *Model) LeaseLossExit(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Failed &&
		st.Hc[g] == HcDead &&
		st.Rs[g] == RsAlive &&
		st.Mount[g] == MountAbsent) {
		return State{}, false
	}
	t := *st
	t.Rs[g] = RsDead
	return t, true
}

func (m *Model) HardLoseSupervisor(st *State, g int) (State, bool) {
	p := st.Phase[g]
	if !((p == Starting || p == Ready || p == Stopping || p == Failed) &&
		st.Rs[g] == RsAlive &&
		st.Faults > 0) {
		return State{}, false
	}
	t := *st
	t.Faults = st.Faults - 1
	t.Rs[g] = RsDead
	if !m.mut(MutRsLossKeepsPhase) {
		t.Phase[g] = Failed
	}
	return t, true
}

func (m *Model) BootstrapRecoveryCoordinator(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Failed &&
		st.Hc[g] == HcDead &&
		(RuntimeAbsent(st, g) || m.mut(MutBootstrapWhileRsAlive))) {
		return State{}, false
	}
	t := *st
	t.Hc[g] = HcAlive
	t.Phase[g] = Recovering
	return t, true
}

func (m *Model) BeginRecovery(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Failed &&
		st.Hc[g] == HcAlive &&
		RuntimeAbsent(st, g)) {
		return State{}, false
	}
	t := *st
	t.Phase[g] = Recovering
	return t, true
}

func (m *Model) RecoveryUnmountAnchor(st *State, g int) (State, bool) {
	if !(st.Phase[g] == Recovering &&
		st.Hc[g] == HcAlive &&
		st.Anchor[g] == PReleaseIntent &&
		st.Mount[g] == Mounted) {
		return State{}, false
	}
	t := *st
	t.Mount[g] = MountAbsent
	return t, true
}
