package integration

import (
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/trace"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// TestModelTracePreparedLowerSwappedStepRejected: a recorded run replays
// through PreparedLower.tla, and the same trace with the supervisor's
// MountAnchor swapped before the coordinator's AnchorIntent (a mount with
// no durable anchor intent) is rejected at that step, readably.
func TestModelTracePreparedLowerSwappedStepRejected(t *testing.T) {
	recs := runAndReadTrace(t, "StartSandbox")
	rep, err := trace.ReplayPreparedLower(recs)
	if err != nil {
		t.Fatalf("the recorded trace is rejected:\n%v", err)
	}
	steps := strings.Join(rep.Steps, "\n")
	for _, want := range []string{"SpawnSupervisor(G1", "AcquireLeaseIntent(G1", "InsertLease(G1", "MountAnchor(G1", "PublishGeneration(G1", "UnmountAnchor(G1", "RemoveLease(G1", "FinishGeneration(G1"} {
		if !strings.Contains(steps, want) {
			t.Errorf("recorded PreparedLower steps lack %s:\n%s", want, steps)
		}
	}
	swapped, _ := swapRecorded(t, recs, modeltrace.PreparedLower, "AnchorIntent", "MountAnchor")
	_, err = trace.ReplayPreparedLower(swapped)
	wantRejection(t, err, "PreparedLower model trace rejected at record", "MountAnchor(G1", "recorded by rs", "not enabled", "preceding steps", "CommitSupervisor(G1", `anchor = "G1" :> "None"`)
}
