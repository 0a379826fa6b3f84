package preparedlower

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// TestTLASync keeps this transcription side by side with tla/PreparedLower.tla,
// tla/PreparedLower.cfg and tla/MAPPING.md.
func TestTLASync(t *testing.T) {
	m := New(Fixture())
	diffs, err := check.TLASync(m.Spec(), ActionNames(), "../../../tla/PreparedLower.tla", "../../../tla/PreparedLower.cfg", "../../../tla/MAPPING.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}

// TestFairnessGroupsMatchModule checks that the transcribed groups list
// exactly the module's disjuncts, in order.
func TestFairnessGroupsMatchModule(t *testing.T) {
	for def, defs := range map[string][]actionDef{
		"PreparationProgress": preparationProgress,
		"GenerationProgress":  generationProgress,
	} {
		want, err := check.TLADisjuncts("../../../tla/PreparedLower.tla", def)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range defs {
			got = append(got, d.name)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: transcribed %v, module %v", def, got, want)
		}
	}
	// Environment's disjuncts sit under quantifiers; every transcribed
	// environment action must be applied in its definition, and no other.
	tla := mustRead(t, "../../../tla/PreparedLower.tla")
	body := regexp.MustCompile(`(?ms)^Environment ==(.*?)\n\n`).FindStringSubmatch(tla)
	if body == nil {
		t.Fatal("no Environment definition")
	}
	applied := regexp.MustCompile(`([A-Z][A-Za-z]+)\([ag]\)`).FindAllStringSubmatch(body[1], -1)
	var want, got []string
	for _, a := range applied {
		want = append(want, a[1])
	}
	for _, d := range append(append([]actionDef{}, environmentArtifact...), environmentGeneration...) {
		got = append(got, d.name)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Environment: transcribed %v, module %v", got, want)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
