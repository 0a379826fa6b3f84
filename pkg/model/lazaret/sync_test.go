package lazaret

import (
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// TestTLASync keeps this transcription side by side with tla/Lazaret.tla,
// tla/Lazaret.cfg and tla/MAPPING.md.
func TestTLASync(t *testing.T) {
	m := New(Fixture())
	diffs, err := check.TLASync(m.Spec(), ActionNames(), "../../../tla/Lazaret.tla", "../../../tla/Lazaret.cfg", "../../../tla/MAPPING.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}

// TestFairnessGroupsMatchModule checks that the transcribed weakly fair
// groups and the unfair interleaving group list exactly the module's
// disjuncts, in order.
func TestFairnessGroupsMatchModule(t *testing.T) {
	for def, kinds := range map[string][]actionKind{
		"DomainServiceProgress":       domainServiceProgress,
		"SessionProgress":             sessionProgress,
		"RequestProgress":             requestProgress,
		"RuntimePhysicalInterleaving": runtimePhysicalInterleaving,
	} {
		want, err := check.TLADisjuncts("../../../tla/Lazaret.tla", def)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range kinds {
			got = append(got, kindNames[k])
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: transcribed %v, module %v", def, got, want)
		}
	}
}
