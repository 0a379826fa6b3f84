package preparedlower

import (
	"github.com/lazaret/lazaret/pkg/model/check"
)

type actionFn func(m *Model, st *State, x int) (State, bool)

type actionDef struct {
	name string
	fn   actionFn
}

// PreparationProgress(a), GenerationProgress(g) and Environment of the
// module, in order.
var (
	preparationProgress = []actionDef{
		{"BeginPrepare", (*Model).BeginPrepare},
		{"CreateStageTree", (*Model).CreateStageTree},
		{"PublishArtifact", (*Model).PublishArtifact},
		{"RecoverStage", (*Model).RecoverStage},
		{"ReclaimArtifact", (*Model).ReclaimArtifact},
	}
	generationProgress = []actionDef{
		{"AcquireLeaseIntent", (*Model).AcquireLeaseIntent},
		{"InsertLease", (*Model).InsertLease},
		{"CommitLeaseHeld", (*Model).CommitLeaseHeld},
		{"SpawnSupervisor", (*Model).SpawnSupervisor},
		{"CommitSupervisor", (*Model).CommitSupervisor},
		{"AnchorIntent", (*Model).AnchorIntent},
		{"MountAnchor", (*Model).MountAnchor},
		{"CommitAnchorPrepared", (*Model).CommitAnchorPrepared},
		{"PublishGeneration", (*Model).PublishGeneration},
		{"AnchorReleaseIntent", (*Model).AnchorReleaseIntent},
		{"UnmountAnchor", (*Model).UnmountAnchor},
		{"AnchorClean", (*Model).AnchorClean},
		{"ReleaseUnanchoredLower", (*Model).ReleaseUnanchoredLower},
		{"RemoveLease", (*Model).RemoveLease},
		{"LowerClean", (*Model).LowerClean},
		{"StopSupervisor", (*Model).StopSupervisor},
		{"ClearSupervisorSlot", (*Model).ClearSupervisorSlot},
		{"FinishGeneration", (*Model).FinishGeneration},
		{"LeaseLossUnmount", (*Model).LeaseLossUnmount},
		{"LeaseLossExit", (*Model).LeaseLossExit},
		{"BootstrapRecoveryCoordinator", (*Model).BootstrapRecoveryCoordinator},
		{"BeginRecovery", (*Model).BeginRecovery},
		{"RecoveryUnmountAnchor", (*Model).RecoveryUnmountAnchor},
	}
	environmentArtifact = []actionDef{
		{"PreparerCrash", (*Model).PreparerCrash},
		{"BeginReclaim", (*Model).BeginReclaim},
		{"RollbackReclaim", (*Model).RollbackReclaim},
	}
	environmentGeneration = []actionDef{
		{"BeginRelease", (*Model).BeginRelease},
		{"HardLoseHostCoordinator", (*Model).HardLoseHostCoordinator},
		{"HardLoseSupervisor", (*Model).HardLoseSupervisor},
	}
)

// ActionNames lists the TLA+ action names of Next, for MAPPING.md checks.
func ActionNames() []string {
	var out []string
	for _, l := range [][]actionDef{preparationProgress, generationProgress, environmentArtifact, environmentGeneration} {
		for _, d := range l {
			out = append(out, d.name)
		}
	}
	return out
}

type instance struct {
	fn  actionFn
	arg int
}

func (m *Model) instances() ([]instance, []check.Action, []string) {
	c := m.C
	var ins []instance
	var acts []check.Action
	var groups []string
	add := func(d actionDef, arg, group int, argName string) {
		if m.unfair(d.name) {
			group = -1
		}
		ins = append(ins, instance{d.fn, arg})
		acts = append(acts, check.Action{Name: d.name + "(" + argName + ")", Group: group})
	}
	na := len(c.Artifacts)
	for a := range c.Artifacts {
		groups = append(groups, "PreparationProgress("+c.Artifacts[a]+")")
	}
	for g := range c.Generations {
		groups = append(groups, "GenerationProgress("+c.Generations[g]+")")
	}
	for a := range c.Artifacts {
		for _, d := range preparationProgress {
			add(d, a, a, c.Artifacts[a])
		}
	}
	for g := range c.Generations {
		for _, d := range generationProgress {
			add(d, g, na+g, c.Generations[g])
		}
	}
	for a := range c.Artifacts {
		for _, d := range environmentArtifact {
			add(d, a, -1, c.Artifacts[a])
		}
	}
	for g := range c.Generations {
		for _, d := range environmentGeneration {
			add(d, g, -1, c.Generations[g])
		}
	}
	return ins, acts, groups
}

// Spec returns the checker's view of Spec with Safety and the liveness
// properties.
func (m *Model) Spec() *check.Spec[State] {
	ins, acts, groups := m.instances()
	hv := make([]func(State, func(State)), len(ins))
	for i := range ins {
		hv[i] = m.havoc(acts[i].Name)
	}
	return &check.Spec[State]{
		Name:      "PreparedLower(" + m.C.Name + ")",
		Actions:   acts,
		Fairness:  groups,
		StateSize: m.C.stateSize(),
		Init:      func(yield func(State)) { yield(m.Init()) },
		Next: func(st State, yield func(int, State)) {
			for i, in := range ins {
				if t, ok := in.fn(m, &st, in.arg); ok {
					if h := hv[i]; h != nil {
						h(t, func(u State) { yield(i, u) })
						continue
					}
					yield(i, t)
				}
			}
		},
		Encode:     m.Encode,
		Decode:     m.Decode,
		Format:     m.Format,
		Invariants: m.Invariants(),
		Properties: m.Properties(),
	}
}

// ---------------------------------------------------------------------------
// Safety

// Invariants returns the conjuncts of Safety in module order.
func (m *Model) Invariants() []check.Invariant[State] {
	w := func(name string, f func(*State) bool) check.Invariant[State] {
		return check.Invariant[State]{Name: name, Holds: func(s State) bool { return f(&s) }}
	}
	return []check.Invariant[State]{
		w("TypeOK", m.TypeOK),
		w("NoReclaimWhileLeased", m.NoReclaimWhileLeased),
		w("LeasedArtifactPublished", m.LeasedArtifactPublished),
		w("PublishedArtifactTreePresent", m.PublishedArtifactTreePresent),
		w("ForeignTreesPreserved", m.ForeignTreesPreserved),
		w("InProgressPrepareTreesKept", m.InProgressPrepareTreesKept),
		w("StageTreesBackedByIntent", m.StageTreesBackedByIntent),
		w("MountedAnchorLeased", m.MountedAnchorLeased),
		w("LeaseHeldRecordMatchesCatalog", m.LeaseHeldRecordMatchesCatalog),
		w("CatalogLeaseHasDomainRecord", m.CatalogLeaseHasDomainRecord),
		w("AnchorRequiresLease", m.AnchorRequiresLease),
		w("ReleaseAfterUnmount", m.ReleaseAfterUnmount),
		w("StagedOwnershipNoDependents", m.StagedOwnershipNoDependents),
		w("PublishedGenerationReady", m.PublishedGenerationReady),
		w("SupervisorOwned", m.SupervisorOwned),
		w("RecoveryAfterRuntimeAbsent", m.RecoveryAfterRuntimeAbsent),
		w("DoneIsClean", m.DoneIsClean),
	}
}

func (m *Model) TypeOK(st *State) bool {
	c := m.C
	var treeMask uint8 = Foreign
	for a := range c.Artifacts {
		treeMask |= StageTree(a) | PubTree(a)
	}
	genMask := uint8(1<<uint(len(c.Generations)) - 1)
	for a := range c.Artifacts {
		if st.Artifact[a] > ArtReclaiming || st.Preparer[a] > PrepCrashed || st.Lease[a]&^genMask != 0 {
			return false
		}
	}
	if st.Trees&^treeMask != 0 {
		return false
	}
	for g := range c.Generations {
		if st.Phase[g] > Done || st.Hc[g] > HcDead || st.Rs[g] > RsDead || st.RsSlot[g] > Committed ||
			st.Lower[g] > PClean || st.Anchor[g] > PClean || st.Mount[g] > Mounted {
			return false
		}
	}
	return int(st.Faults) <= c.MaxFaults && int(st.Reclaims) <= c.MaxReclaims
}

func (m *Model) NoReclaimWhileLeased(st *State) bool {
	for a := range m.C.Artifacts {
		if st.Artifact[a] == ArtReclaiming && st.Lease[a] != 0 {
			return false
		}
	}
	return true
}

func (m *Model) LeasedArtifactPublished(st *State) bool {
	for a := range m.C.Artifacts {
		if st.Lease[a] != 0 && !(st.Artifact[a] == ArtPublished && st.Trees&PubTree(a) != 0) {
			return false
		}
	}
	return true
}

func (m *Model) PublishedArtifactTreePresent(st *State) bool {
	for a := range m.C.Artifacts {
		pub := st.Artifact[a] == ArtPublished || st.Artifact[a] == ArtReclaiming
		if pub != (st.Trees&PubTree(a) != 0) {
			return false
		}
	}
	return true
}

func (m *Model) ForeignTreesPreserved(st *State) bool { return st.Trees&Foreign != 0 }

func (m *Model) InProgressPrepareTreesKept(st *State) bool {
	for a := range m.C.Artifacts {
		if st.Preparer[a] == PrepStaging && st.Trees&StageTree(a) == 0 {
			return false
		}
		if st.Preparer[a] != PrepNone && st.Artifact[a] != ArtPreparing {
			return false
		}
	}
	return true
}

func (m *Model) StageTreesBackedByIntent(st *State) bool {
	for a := range m.C.Artifacts {
		if st.Trees&StageTree(a) != 0 && st.Artifact[a] != ArtPreparing {
			return false
		}
	}
	return true
}

func (m *Model) MountedAnchorLeased(st *State) bool {
	for g := range m.C.Generations {
		a := m.A(g)
		if st.Mount[g] == Mounted && !(inLease(st, a, g) && st.Artifact[a] == ArtPublished && st.Trees&PubTree(a) != 0) {
			return false
		}
	}
	return true
}

func (m *Model) LeaseHeldRecordMatchesCatalog(st *State) bool {
	for g := range m.C.Generations {
		if st.Lower[g] == PActive && !inLease(st, m.A(g), g) {
			return false
		}
	}
	return true
}

func (m *Model) CatalogLeaseHasDomainRecord(st *State) bool {
	for a := range m.C.Artifacts {
		for g := range m.C.Generations {
			if !inLease(st, a, g) {
				continue
			}
			l := st.Lower[g]
			if !(m.A(g) == a && (l == PIntent || l == PActive || l == PReleaseIntent)) {
				return false
			}
		}
	}
	return true
}

func (m *Model) AnchorRequiresLease(st *State) bool {
	for g := range m.C.Generations {
		x := st.Anchor[g]
		if (x == PIntent || x == PActive || x == PReleaseIntent) && st.Lower[g] != PActive {
			return false
		}
	}
	return true
}

func (m *Model) ReleaseAfterUnmount(st *State) bool {
	for g := range m.C.Generations {
		if st.Anchor[g] == PClean && st.Mount[g] != MountAbsent {
			return false
		}
		if (st.Lower[g] == PReleaseIntent || st.Lower[g] == PClean) &&
			!(st.Mount[g] == MountAbsent && (st.Anchor[g] == PNone || st.Anchor[g] == PClean)) {
			return false
		}
		x := st.Anchor[g]
		if st.Mount[g] == Mounted && !(x == PIntent || x == PActive || x == PReleaseIntent) {
			return false
		}
	}
	return true
}

func (m *Model) StagedOwnershipNoDependents(st *State) bool {
	for g := range m.C.Generations {
		if st.Mount[g] == Mounted && (st.Phase[g] == Starting || st.Phase[g] == Ready) && st.RsSlot[g] != Committed {
			return false
		}
	}
	return true
}

func (m *Model) PublishedGenerationReady(st *State) bool {
	for g := range m.C.Generations {
		if st.Phase[g] == Ready && !(st.Hc[g] == HcAlive && st.Lower[g] == PActive && st.Anchor[g] == PActive &&
			st.Mount[g] == Mounted && st.Rs[g] == RsAlive && st.RsSlot[g] == Committed) {
			return false
		}
	}
	return true
}

func (m *Model) SupervisorOwned(st *State) bool {
	for g := range m.C.Generations {
		if st.Rs[g] == RsAlive && !(st.RsSlot[g] == Staged || st.RsSlot[g] == Committed) {
			return false
		}
	}
	return true
}

func (m *Model) RecoveryAfterRuntimeAbsent(st *State) bool {
	for g := range m.C.Generations {
		if st.Phase[g] == Recovering && !RuntimeAbsent(st, g) {
			return false
		}
	}
	return true
}

func (m *Model) DoneIsClean(st *State) bool {
	for g := range m.C.Generations {
		if st.Phase[g] != Done {
			continue
		}
		if !((st.Lower[g] == PNone || st.Lower[g] == PClean) && (st.Anchor[g] == PNone || st.Anchor[g] == PClean) &&
			st.Mount[g] == MountAbsent && !inLease(st, m.A(g), g) && RuntimeAbsent(st, g) && st.RsSlot[g] == Unassigned) {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Liveness

// Properties returns the liveness properties, one per quantifier instance.
func (m *Model) Properties() []check.Property[State] {
	c := m.C
	var ps []check.Property[State]
	for g := range c.Generations {
		ps = append(ps, check.Property[State]{
			Name:  "ReleaseEventuallyCompletes[" + c.Generations[g] + "]",
			Start: func(s State) bool { return s.Phase[g] == Stopping || s.Phase[g] == Failed },
			Avoid: func(s State) bool { return s.Phase[g] != Done },
		})
	}
	for g := range c.Generations {
		ps = append(ps, check.Property[State]{
			Name:  "StartEventuallyResolves[" + c.Generations[g] + "]",
			Start: func(s State) bool { return s.Phase[g] == Starting },
			Avoid: func(s State) bool { return s.Phase[g] == Starting },
		})
	}
	for g := range c.Generations {
		ps = append(ps, check.Property[State]{
			Name:  "LeaseIntentEventuallyResolves[" + c.Generations[g] + "]",
			Start: func(s State) bool { return s.Lower[g] == PIntent },
			Avoid: func(s State) bool { return !(s.Lower[g] == PActive || s.Lower[g] == PClean) },
		})
	}
	for a := range c.Artifacts {
		ps = append(ps, check.Property[State]{
			Name:  "PreparationEventuallyResolves[" + c.Artifacts[a] + "]",
			Start: func(s State) bool { return s.Artifact[a] == ArtPreparing },
			Avoid: func(s State) bool { return !(s.Artifact[a] == ArtPublished || s.Artifact[a] == ArtAbsent) },
		})
	}
	for a := range c.Artifacts {
		ps = append(ps, check.Property[State]{
			Name:  "ReclaimEventuallyCompletes[" + c.Artifacts[a] + "]",
			Start: func(s State) bool { return s.Artifact[a] == ArtReclaiming },
			Avoid: func(s State) bool { return !(s.Artifact[a] == ArtAbsent || s.Artifact[a] == ArtPublished) },
		})
	}
	return ps
}

// Act applies the action of Next named name to instance x (an artifact
// index for the actions of PreparationProgress and PreparerCrash,
// BeginReclaim; a generation index otherwise), as trace replay needs it:
// the successor, whether the action is enabled, and whether Next has an
// action of that name at all. An artifact's actions are reported by
// ArtifactAction.
func (m *Model) Act(name string, st *State, x int) (next State, enabled, known bool) {
	for _, l := range [][]actionDef{preparationProgress, generationProgress, environmentArtifact, environmentGeneration} {
		for _, d := range l {
			if d.name == name {
				next, enabled = d.fn(m, st, x)
				return next, enabled, true
			}
		}
	}
	return State{}, false, false
}

// ArtifactAction reports whether the action of Next named name takes an
// artifact (rather than a generation).
func ArtifactAction(name string) bool {
	for _, l := range [][]actionDef{preparationProgress, environmentArtifact} {
		for _, d := range l {
			if d.name == name {
				return true
			}
		}
	}
	return false
}
