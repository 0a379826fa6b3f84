package teeth

import (
	"strings"
	"testing"
)

const sample = `package x

import "github.com/lazaret/lazaret/pkg/model/check"

func (m *Model) Guarded(st *State) bool {
	return st.X == 1
}

func (m *Model) Properties() []check.Property[State] {
	var ps []check.Property[State]
	for g := range m.C.G {
		ps = append(ps, check.Property[State]{
			Name:  "Eventually[" + m.C.G[g] + "]",
			Start: func(s State) bool { return s.X == 0 },
			Avoid: func(s State) bool { return s.X != 2 },
		})
	}
	return ps
}
`

func TestHookInvariant(t *testing.T) {
	out, ok, err := Hook([]byte(sample), "Guarded", "invariant")
	if err != nil || !ok {
		t.Fatalf("Hook: %v %v", ok, err)
	}
	if !strings.Contains(string(out), "if teethBlank == \"Guarded\" {\n\t\treturn true\n\t}\n\treturn st.X == 1") {
		t.Fatalf("body not hooked:\n%s", out)
	}
}

func TestHookProperty(t *testing.T) {
	out, ok, err := Hook([]byte(sample), "Eventually", "property")
	if err != nil || !ok {
		t.Fatalf("Hook: %v %v", ok, err)
	}
	if !strings.Contains(string(out), "Avoid: teethAvoid(\"Eventually\", func(s State) bool { return s.X != 2 })") {
		t.Fatalf("Avoid not hooked:\n%s", out)
	}
	if _, ok, _ := Hook([]byte(sample), "Eventual", "property"); ok {
		t.Fatal("a prefix of the name matched")
	}
}

// TestEveryCfgPropertyHasABody keeps the teeth measurement complete: each
// INVARIANTS and PROPERTIES entry of tla/*.cfg must be found in the Go
// transcription, or model-teeth could not blank it.
func TestEveryCfgPropertyHasABody(t *testing.T) {
	ts, err := Targets("../../..")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, x := range ts {
		count[x.Model.Name+" "+x.Kind]++
	}
	want := map[string]int{"Lazaret invariant": 36, "Lazaret property": 6, "PreparedLower invariant": 17, "PreparedLower property": 5}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d targets, want %d (tla/*.cfg changed? update this count)", k, count[k], n)
		}
	}
}
