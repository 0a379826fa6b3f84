package preparedlower

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

func steps(actions ...string) []check.Step[State] {
	out := make([]check.Step[State], len(actions))
	for i, a := range actions {
		out[i] = check.Step[State]{Action: a}
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var prepareA1 = []string{"AcquireLeaseIntent(G1)", "BeginPrepare(A1)", "CreateStageTree(A1)", "PublishArtifact(A1)"}

var startG1 = concat(prepareA1, []string{
	"InsertLease(G1)", "CommitLeaseHeld(G1)", "SpawnSupervisor(G1)", "CommitSupervisor(G1)",
	"AnchorIntent(G1)", "MountAnchor(G1)", "CommitAnchorPrepared(G1)", "PublishGeneration(G1)",
})

func TestLegalTracesAccepted(t *testing.T) {
	traces := map[string][]string{
		"publish, release, reclaim": concat(startG1, []string{
			"BeginRelease(G1)", "AnchorReleaseIntent(G1)", "UnmountAnchor(G1)", "AnchorClean(G1)",
			"RemoveLease(G1)", "LowerClean(G1)", "StopSupervisor(G1)", "ClearSupervisorSlot(G1)",
			"FinishGeneration(G1)", "BeginReclaim(A1)", "ReclaimArtifact(A1)",
		}),
		"HC loss split: supervisor unmounts, bootstrap releases the lease": concat(startG1, []string{
			"HardLoseHostCoordinator(G1)", "LeaseLossUnmount(G1)", "LeaseLossExit(G1)",
			"BootstrapRecoveryCoordinator(G1)", "AnchorReleaseIntent(G1)", "AnchorClean(G1)",
			"RemoveLease(G1)", "LowerClean(G1)", "ClearSupervisorSlot(G1)", "FinishGeneration(G1)",
		}),
		"supervisor crash leaves the mount; recovery unmounts": concat(startG1, []string{
			"HardLoseSupervisor(G1)", "BeginRecovery(G1)", "AnchorReleaseIntent(G1)",
			"RecoveryUnmountAnchor(G1)", "AnchorClean(G1)", "RemoveLease(G1)", "LowerClean(G1)",
			"ClearSupervisorSlot(G1)", "FinishGeneration(G1)",
		}),
		"shared artifact, second lease, crashed preparer recovered": {
			"AcquireLeaseIntent(G1)", "AcquireLeaseIntent(G2)", "BeginPrepare(A1)", "CreateStageTree(A1)",
			"PreparerCrash(A1)", "RecoverStage(A1)", "BeginPrepare(A1)", "CreateStageTree(A1)",
			"PublishArtifact(A1)", "InsertLease(G1)", "InsertLease(G2)", "CommitLeaseHeld(G2)",
		},
	}
	for name, tr := range traces {
		t.Run(name, func(t *testing.T) {
			m := New(Fixture())
			sp := m.Spec()
			states, err := check.ReplaySteps(sp, m.Init(), steps(tr...))
			if err != nil {
				t.Fatalf("legal trace rejected: %v", err)
			}
			if _, err := check.ReplayStates(sp, states); err != nil {
				t.Fatalf("state replay rejected: %v", err)
			}
		})
	}
}

func TestIllegalTracesRejected(t *testing.T) {
	m := New(Fixture())
	sp := m.Spec()
	cases := []struct {
		name  string
		trace []string
		step  int
	}{
		{"a Staged slot satisfying readiness (mount)", concat(prepareA1, []string{
			"InsertLease(G1)", "CommitLeaseHeld(G1)", "SpawnSupervisor(G1)", "AnchorIntent(G1)",
			"MountAnchor(G1)"}), 9},
		{"publication before the anchor is prepared", concat(prepareA1, []string{
			"InsertLease(G1)", "CommitLeaseHeld(G1)", "SpawnSupervisor(G1)", "CommitSupervisor(G1)",
			"PublishGeneration(G1)"}), 9},
		{"lease before the artifact is published", []string{
			"AcquireLeaseIntent(G1)", "BeginPrepare(A1)", "InsertLease(G1)"}, 3},
		{"lease release before unmount", concat(startG1, []string{
			"BeginRelease(G1)", "AnchorReleaseIntent(G1)", "AnchorClean(G1)"}), 15},
		{"reclaim while leased", concat(startG1, []string{"BeginReclaim(A1)"}), 13},
		{"in-progress stage tree deleted", []string{
			"AcquireLeaseIntent(G1)", "BeginPrepare(A1)", "CreateStageTree(A1)", "RecoverStage(A1)"}, 4},
		{"surviving supervisor releases the lease", concat(startG1, []string{
			"HardLoseHostCoordinator(G1)", "LeaseLossUnmount(G1)", "LeaseLossExit(G1)", "RemoveLease(G1)"}), 16},
		{"bootstrap while the supervisor is alive", concat(startG1, []string{
			"HardLoseHostCoordinator(G1)", "BootstrapRecoveryCoordinator(G1)"}), 14},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := check.ReplaySteps(sp, m.Init(), steps(tc.trace...))
			re, ok := err.(*check.ReplayError)
			if !ok {
				t.Fatalf("illegal trace accepted (err %v)", err)
			}
			if re.Index != tc.step {
				t.Fatalf("rejected at step %d (%v), want %d", re.Index, err, tc.step)
			}
			t.Logf("rejected: %v", err)
		})
	}
	// State level: a forged step in which a generation with a Staged
	// supervisor slot becomes Ready.
	prefix, err := check.ReplaySteps(sp, m.Init(), steps(concat(prepareA1, []string{
		"InsertLease(G1)", "CommitLeaseHeld(G1)", "SpawnSupervisor(G1)", "AnchorIntent(G1)"})...))
	if err != nil {
		t.Fatal(err)
	}
	forged := prefix[len(prefix)-1]
	forged.Mount[0] = Mounted
	forged.Anchor[0] = PActive
	forged.Phase[0] = Ready
	if _, err := check.ReplayStates(sp, append(prefix, forged)); err == nil {
		t.Fatal("Staged slot satisfying readiness accepted as a state trace")
	} else {
		t.Logf("staged readiness state trace: %v", err)
	}
}
