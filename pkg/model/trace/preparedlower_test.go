package trace

import (
	"errors"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// plTrace builds PreparedLower records the way the products emit them
// (package modeltrace): generation steps name their Domain and generation,
// artifact steps the artifact.
type plTrace struct{ recs []modeltrace.Record }

func (p *plTrace) gen(role, domain string, gen uint64, artifact string, actions ...string) *plTrace {
	for _, a := range actions {
		r := modeltrace.Record{V: 1, Seq: uint64(len(p.recs) + 1), Model: modeltrace.PreparedLower, Action: a,
			Args: []string{modeltrace.GenerationKey(domain, gen)}, Role: role, Domain: domain, Generation: gen}
		if artifact != "" {
			r.Facts = map[string]string{modeltrace.FactArtifact: artifact}
		}
		p.recs = append(p.recs, r)
	}
	return p
}

func (p *plTrace) reconcile(domain string, gen uint64, actions ...string) *plTrace {
	for _, a := range actions {
		p.recs = append(p.recs, modeltrace.Record{V: 1, Seq: uint64(len(p.recs) + 1), Model: modeltrace.PreparedLower, Action: a,
			Args: []string{modeltrace.GenerationKey(domain, gen)}, Role: "hc", Domain: domain, Generation: gen, Reconcile: true})
	}
	return p
}

func (p *plTrace) art(role, domain string, gen uint64, artifact string, actions ...string) *plTrace {
	for _, a := range actions {
		p.recs = append(p.recs, modeltrace.Record{V: 1, Seq: uint64(len(p.recs) + 1), Model: modeltrace.PreparedLower, Action: a,
			Args: []string{artifact}, Role: role, Domain: domain, Generation: gen})
	}
	return p
}

// start is a generation's start as recorded by coordinator and supervisor
// (TestRunExitStatus): spawn, (preparation), lease, anchor, publication.
func (p *plTrace) start(domain string, gen uint64, artifact string, prepare bool) *plTrace {
	p.gen("hc", domain, gen, "", "SpawnSupervisor")
	if prepare {
		p.art("rs", domain, gen, artifact, "BeginPrepare", "CreateStageTree", "PublishArtifact")
	}
	p.gen("hc", domain, gen, artifact, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")
	p.gen("rs", domain, gen, artifact, "MountAnchor")
	return p.gen("hc", domain, gen, artifact, "CommitAnchorPrepared", "PublishGeneration")
}

// stop is the ordered release of a published generation.
func (p *plTrace) stop(domain string, gen uint64, artifact string) *plTrace {
	p.gen("hc", domain, gen, artifact, "BeginRelease", "AnchorReleaseIntent")
	p.gen("rs", domain, gen, artifact, "UnmountAnchor")
	return p.gen("hc", domain, gen, artifact, "StopSupervisor", "AnchorClean", "RemoveLease", "LowerClean", "ClearSupervisorSlot", "FinishGeneration")
}

const (
	domA = "4f83651b9aab340ce72c5ce66766ddee"
	domB = "45b836a75d1c3cb6abcf047cb719ff5e"
	art1 = "pl-768debaa8d70b5672c281443db706d01"
	art2 = "pl-0123456789abcdef0123456789abcdef"
)

func replayPL(t *testing.T, p *plTrace) PLReplay {
	t.Helper()
	rep, err := ReplayPreparedLower(p.recs)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if len(rep.Open) > 0 {
		t.Fatalf("generations not Done: %v", rep.Open)
	}
	return rep
}

// A recorded normal run: the first start prepares the artifact, six
// generations of one Domain follow each other (more than the state holds:
// Done slots are recycled), then gc reclaims the unleased artifact.
func TestReplayPreparedLowerNormalRun(t *testing.T) {
	p := &plTrace{}
	p.start(domA, 1, art1, true).stop(domA, 1, art1)
	for g := uint64(2); g <= 6; g++ {
		p.start(domA, g, art1, false).stop(domA, g, art1)
	}
	// The next coordinator's bootstrap of a generation that ended (and
	// whose slot was recycled) is a stutter.
	p.reconcile(domA, 1, "BootstrapRecoveryCoordinator")
	p.art("cli", "", 0, art1, "BeginReclaim", "ReclaimArtifact")
	rep := replayPL(t, p)
	if rep.Recycled != 2 || len(rep.Generations) != 6 || len(rep.Artifacts) != 1 {
		t.Fatalf("replay: %d recycled, generations %v, artifacts %v", rep.Recycled, rep.Generations, rep.Artifacts)
	}
	if last := rep.Steps[len(rep.Steps)-1]; !strings.HasPrefix(last, "ReclaimArtifact(A1") {
		t.Fatalf("last step %s", last)
	}
}

// An artifact published before the trace began starts Published.
func TestReplayPreparedLowerArtifactPublishedBefore(t *testing.T) {
	p := (&plTrace{}).start(domA, 3, art1, false).stop(domA, 3, art1)
	replayPL(t, p)
}

// The coordinator's loss (TestSupervisorLossTearsDown/lazaret-hc): RS's
// lease-loss teardown unmounts and exits, the next coordinator's bootstrap
// recovers the generation (its loss is inferred), then starts the next.
func TestReplayPreparedLowerCoordinatorLoss(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true)
	p.gen("rs", domA, 1, art1, "LeaseLossUnmount", "LeaseLossExit")
	p.reconcile(domA, 1, "BootstrapRecoveryCoordinator")
	p.gen("hc", domA, 1, art1, "AnchorReleaseIntent")
	p.reconcile(domA, 1, "RecoveryUnmountAnchor")
	p.gen("hc", domA, 1, art1, "AnchorClean", "RemoveLease", "LowerClean")
	p.reconcile(domA, 1, "ClearSupervisorSlot")
	p.gen("hc", domA, 1, "", "FinishGeneration")
	p.start(domA, 2, art1, false).stop(domA, 2, art1)
	rep := replayPL(t, p)
	joined := strings.Join(rep.Steps, "\n")
	for _, want := range []string{"inferred: HardLoseHostCoordinator(G1", "stutter: RecoveryUnmountAnchor(G1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no %s step in:\n%s", want, joined)
		}
	}
}

// The supervisor's loss during release: recovery by the surviving
// coordinator.
func TestReplayPreparedLowerSupervisorLoss(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true)
	p.gen("hc", domA, 1, art1, "BeginRelease", "AnchorReleaseIntent", "HardLoseSupervisor", "BeginRecovery")
	p.reconcile(domA, 1, "RecoveryUnmountAnchor")
	p.gen("hc", domA, 1, art1, "AnchorClean", "RemoveLease", "LowerClean", "ClearSupervisorSlot", "FinishGeneration")
	replayPL(t, p)
}

// Two Domains share one artifact: the second leases it while the first
// holds it, gc cannot reclaim it until both released it.
func TestReplayPreparedLowerSharedArtifact(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true).start(domB, 1, art1, false)
	p.stop(domA, 1, art1)
	bad := append([]modeltrace.Record(nil), p.recs...)
	p.stop(domB, 1, art1)
	p.art("cli", "", 0, art1, "BeginReclaim", "ReclaimArtifact")
	rep := replayPL(t, p)
	if len(rep.Generations) != 2 || len(rep.Artifacts) != 1 {
		t.Fatalf("generations %v, artifacts %v", rep.Generations, rep.Artifacts)
	}
	// gc while Domain B still holds its lease is not a behaviour of the
	// model (NoReclaimWhileLeased: BeginReclaim is not enabled).
	q := &plTrace{recs: bad}
	q.art("cli", "", 0, art1, "BeginReclaim")
	_, err := ReplayPreparedLower(q.recs)
	var rej *RejectError
	if !errors.As(err, &rej) || !strings.HasPrefix(rej.Label, "BeginReclaim(A1") {
		t.Fatalf("reclaim while leased: %v", err)
	}
}

// A generation whose preparation failed: the preparer's crash is
// inferred, its stage recovered, the next attempt publishes.
func TestReplayPreparedLowerPreparerFailure(t *testing.T) {
	p := &plTrace{}
	p.gen("hc", domA, 1, "", "SpawnSupervisor")
	p.art("rs", domA, 1, art2, "BeginPrepare", "CreateStageTree", "RecoverStage")
	p.gen("hc", domA, 1, "", "BeginRelease", "HardLoseSupervisor", "BeginRecovery", "ClearSupervisorSlot", "FinishGeneration")
	p.start(domA, 2, art2, true).stop(domA, 2, art2)
	rep := replayPL(t, p)
	if !strings.Contains(strings.Join(rep.Steps, "\n"), "inferred: PreparerCrash(A1") {
		t.Fatalf("no inferred preparer crash:\n%s", strings.Join(rep.Steps, "\n"))
	}
}

// Swapping two recorded steps is rejected, readably, at the first step
// the model does not allow: the supervisor mounting before the
// coordinator recorded the anchor's intent, and releasing the lease
// before the anchor is clean.
func TestReplayPreparedLowerSwappedStepsRejected(t *testing.T) {
	for _, tc := range []struct {
		a, b   string
		reject string
	}{
		{"AnchorIntent", "MountAnchor", "MountAnchor(G1"},
		{"UnmountAnchor", "AnchorReleaseIntent", "UnmountAnchor(G1"},
		{"AnchorClean", "RemoveLease", "RemoveLease(G1"},
		{"InsertLease", "AcquireLeaseIntent", "InsertLease(G1"},
	} {
		p := (&plTrace{}).start(domA, 1, art1, true).stop(domA, 1, art1)
		i, j := -1, -1
		for k, r := range p.recs {
			switch r.Action {
			case tc.a:
				i = k
			case tc.b:
				j = k
			}
		}
		p.recs[i], p.recs[j] = p.recs[j], p.recs[i]
		_, err := ReplayPreparedLower(p.recs)
		var rej *RejectError
		if !errors.As(err, &rej) {
			t.Fatalf("%s swapped with %s: replay %v, want a rejection", tc.a, tc.b, err)
		}
		if !strings.HasPrefix(rej.Label, tc.reject) || !strings.Contains(err.Error(), "PreparedLower model trace rejected at record") ||
			!strings.Contains(err.Error(), "preceding steps") || !strings.Contains(err.Error(), "/\\ mount = ") {
			t.Fatalf("%s swapped with %s: rejection\n%v\nwant it at %s with the preceding steps and the state", tc.a, tc.b, err, tc.reject)
		}
	}
}

// A record the recorder's role may not take, and a generation step of
// a generation that finished, are rejected.
func TestReplayPreparedLowerRefusesMisrecorded(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true)
	p.recs[len(p.recs)-1].Role = "rs" // PublishGeneration by the supervisor
	if _, err := ReplayPreparedLower(p.recs); err == nil || !strings.Contains(err.Error(), "is recorded by hc, not rs") {
		t.Fatalf("PublishGeneration by rs: %v", err)
	}
	q := (&plTrace{}).start(domA, 1, art1, true).stop(domA, 1, art1)
	q.gen("hc", domA, 1, art1, "BeginRelease")
	if _, err := ReplayPreparedLower(q.recs); err == nil || !strings.Contains(err.Error(), "not enabled") {
		t.Fatalf("BeginRelease after FinishGeneration: %v", err)
	}
}

// More artifacts than the state holds: idle ones are evicted and come
// back as they were (a Published artifact is leased again, a reclaimed
// one prepared again).
func TestReplayPreparedLowerManyArtifacts(t *testing.T) {
	p := &plTrace{}
	arts := []string{"pl-00000000000000000000000000000001", "pl-00000000000000000000000000000002", "pl-00000000000000000000000000000003",
		"pl-00000000000000000000000000000004", "pl-00000000000000000000000000000005"}
	g := uint64(0)
	for _, a := range arts {
		g++
		p.start(domA, g, a, true).stop(domA, g, a)
	}
	g++
	p.start(domA, g, arts[0], false).stop(domA, g, arts[0])
	p.art("cli", "", 0, arts[1], "BeginReclaim", "ReclaimArtifact")
	g++
	p.start(domA, g, arts[1], true).stop(domA, g, arts[1])
	rep := replayPL(t, p)
	if rep.Evicted == 0 || len(rep.Artifacts) != 5 {
		t.Fatalf("evicted %d, artifacts %v", rep.Evicted, rep.Artifacts)
	}
	// Preparing a Published artifact again is not a behaviour.
	q := (&plTrace{}).start(domA, 1, arts[0], true).stop(domA, 1, arts[0])
	for i, a := range arts[1:] {
		q.start(domA, uint64(i+2), a, true).stop(domA, uint64(i+2), a)
	}
	q.start(domA, 9, arts[0], true)
	if _, err := ReplayPreparedLower(q.recs); err == nil || !strings.Contains(err.Error(), "BeginPrepare(") {
		t.Fatalf("preparing an evicted Published artifact again: %v", err)
	}
}

// `lazaret rm` removes a Domain's store: its generation numbers restart,
// and a finished generation's key starts a new incarnation at its next
// SpawnSupervisor; one that has not finished may not be spawned again.
func TestReplayPreparedLowerGenerationNumbersRestart(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true).stop(domA, 1, art1)
	p.start(domA, 1, art1, false).stop(domA, 1, art1)
	rep := replayPL(t, p)
	if len(rep.Generations) != 2 {
		t.Fatalf("generations %v", rep.Generations)
	}
	q := (&plTrace{}).start(domA, 1, art1, true)
	q.gen("hc", domA, 1, "", "SpawnSupervisor")
	if _, err := ReplayPreparedLower(q.recs); err == nil || !strings.Contains(err.Error(), "has not finished") {
		t.Fatalf("second spawn of a running generation: %v", err)
	}
}

// A coordinator takes the lease's first steps ahead of its supervisor's
// spawn (preparedlower.LeaseAhead): a generation, and after `lazaret rm`
// the next incarnation of its key, may begin with AcquireLeaseIntent; a
// second one within a running generation is rejected.
func TestReplayPreparedLowerLeaseAheadBeginsGeneration(t *testing.T) {
	ahead := func(p *plTrace, gen uint64) *plTrace {
		p.gen("hc", domA, gen, art1, "AcquireLeaseIntent", "InsertLease")
		p.gen("hc", domA, gen, "", "SpawnSupervisor")
		p.gen("hc", domA, gen, art1, "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")
		p.gen("rs", domA, gen, art1, "MountAnchor")
		return p.gen("hc", domA, gen, art1, "CommitAnchorPrepared", "PublishGeneration")
	}
	p := ahead(&plTrace{}, 1).stop(domA, 1, art1)
	ahead(p, 1).stop(domA, 1, art1)                   // after `lazaret rm`
	p.start(domA, 1, art1, false).stop(domA, 1, art1) // and again, spawned first
	rep := replayPL(t, p)
	if len(rep.Generations) != 3 {
		t.Fatalf("generations %v, want three incarnations", rep.Generations)
	}
	q := ahead(&plTrace{}, 1)
	q.gen("hc", domA, 1, art1, "AcquireLeaseIntent")
	if _, err := ReplayPreparedLower(q.recs); err == nil || !strings.Contains(err.Error(), "has not finished") {
		t.Fatalf("second lease intent of a running generation: %v", err)
	}
}

// An interrupted reclamation whose tree never left is rolled back before
// the next lease (TestOR7GCCrashRecovery's gc killed after Reclaiming).
func TestReplayPreparedLowerReclaimRolledBack(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true).stop(domA, 1, art1)
	p.art("cli", "", 0, art1, "BeginReclaim")
	p.gen("hc", domA, 2, "", "SpawnSupervisor")
	p.art("hc", domA, 2, art1, "RollbackReclaim")
	p.gen("hc", domA, 2, art1, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")
	p.gen("rs", domA, 2, art1, "MountAnchor")
	p.gen("hc", domA, 2, art1, "CommitAnchorPrepared", "PublishGeneration")
	p.stop(domA, 2, art1)
	replayPL(t, p)
	// Without the rollback the lease is refused (the artifact Reclaiming).
	q := &plTrace{}
	for _, r := range p.recs {
		if r.Action != "RollbackReclaim" {
			q.recs = append(q.recs, r)
		}
	}
	if _, err := ReplayPreparedLower(q.recs); err == nil || !strings.Contains(err.Error(), "InsertLease(") {
		t.Fatalf("lease of a Reclaiming artifact: %v", err)
	}
}

// More Domains' generations at once than the model's state holds (the
// scale benchmark) is ErrBeyondBounds, told apart from a forbidden step.
func TestReplayPreparedLowerBeyondBounds(t *testing.T) {
	p := (&plTrace{}).start(domA, 1, art1, true)
	for d := 1; d < 5; d++ {
		p.start(strings.Repeat(string(rune('a'+d)), 32), 1, art1, false)
	}
	_, err := ReplayPreparedLower(p.recs)
	if !errors.Is(err, ErrBeyondBounds) {
		t.Fatalf("five generations at once: %v, want ErrBeyondBounds", err)
	}
	// A forbidden step is not ErrBeyondBounds.
	q := (&plTrace{}).start(domA, 1, art1, true)
	q.art("cli", "", 0, art1, "BeginReclaim")
	if _, err := ReplayPreparedLower(q.recs); err == nil || errors.Is(err, ErrBeyondBounds) {
		t.Fatalf("reclaim while leased: %v, want a rejection that is not ErrBeyondBounds", err)
	}
}
