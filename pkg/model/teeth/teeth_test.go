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

func TestBlankInvariant(t *testing.T) {
	out, ok, err := Blank([]byte(sample), "Guarded", "invariant")
	if err != nil || !ok {
		t.Fatalf("Blank: %v %v", ok, err)
	}
	if !strings.Contains(string(out), "Guarded(st *State) bool { return true }") || strings.Contains(string(out), "st.X == 1") {
		t.Fatalf("body not replaced:\n%s", out)
	}
}

func TestBlankProperty(t *testing.T) {
	out, ok, err := Blank([]byte(sample), "Eventually", "property")
	if err != nil || !ok {
		t.Fatalf("Blank: %v %v", ok, err)
	}
	if !strings.Contains(string(out), "Avoid: func(State) bool {\n\t\t\t\treturn false") || strings.Contains(string(out), "s.X != 2") {
		t.Fatalf("Avoid not replaced:\n%s", out)
	}
	if _, ok, _ := Blank([]byte(sample), "Eventual", "property"); ok {
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
