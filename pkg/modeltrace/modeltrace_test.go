package modeltrace

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The PreparedLower records name their generation by Domain and
// generation (the argument is GenerationKey), carry the artifact fact
// where given, and mark reconcile steps; artifact steps name the artifact.
func TestPreparedLowerRecords(t *testing.T) {
	p := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := Start("hc", func(k string) string { return map[string]string{Env: p}[k] }); err != nil {
		t.Fatal(err)
	}
	defer active.Store(nil)
	EmitGeneration("d1", 3, "pl-a", "InsertLease")
	EmitGenerationReconcile("d1", 2, "", "BootstrapRecoveryCoordinator")
	EmitArtifact("d1", 3, "BeginPrepare", "pl-a")
	EmitArtifact("", 0, "ReclaimArtifact", "pl-a")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	for i, want := range []Record{
		{Model: PreparedLower, Action: "InsertLease", Args: []string{"d1/3"}, Domain: "d1", Generation: 3, Facts: map[string]string{FactArtifact: "pl-a"}},
		{Model: PreparedLower, Action: "BootstrapRecoveryCoordinator", Args: []string{"d1/2"}, Domain: "d1", Generation: 2, Reconcile: true},
		{Model: PreparedLower, Action: "BeginPrepare", Args: []string{"pl-a"}, Domain: "d1", Generation: 3},
		{Model: PreparedLower, Action: "ReclaimArtifact", Args: []string{"pl-a"}},
	} {
		r := recs[i]
		if r.Model != want.Model || r.Action != want.Action || strings.Join(r.Args, ",") != strings.Join(want.Args, ",") || r.Domain != want.Domain ||
			r.Generation != want.Generation || r.Reconcile != want.Reconcile || r.Facts[FactArtifact] != want.Facts[FactArtifact] || r.Role != "hc" || r.Seq != uint64(i+1) {
			t.Errorf("record %d: %+v, want %+v", i+1, r, want)
		}
	}
}
