package cli

import "testing"

// TestRecipeBuildNotice: `lazaret image build` says it builds (not that a
// run found the image missing); a run says it builds once; a forced
// rebuild of a current image and a changed base say so.
func TestRecipeBuildNotice(t *testing.T) {
	for _, c := range []struct {
		req            recipeRequest
		built, current bool
		want           string
	}{
		{recipeForRun, false, false, "lazaret: the image of profile py is not built yet: building it from its recipe (once; later runs reuse it)"},
		{recipeForBuild, false, false, "lazaret: building the image of profile py from its recipe"},
		{recipeForForcedBuild, false, false, "lazaret: building the image of profile py from its recipe"},
		{recipeForRun, true, false, "lazaret: the base image of profile py changed since its image was built: rebuilding it from its recipe"},
		{recipeForBuild, true, false, "lazaret: the base image of profile py changed since its image was built: rebuilding it from its recipe"},
		{recipeForForcedBuild, true, true, "lazaret: rebuilding the image of profile py from its recipe (--force)"},
	} {
		if got := recipeBuildNotice("py", c.req, c.built, c.current); got != c.want {
			t.Errorf("recipeBuildNotice(%v, built %v, current %v) = %q, want %q", c.req, c.built, c.current, got, c.want)
		}
	}
}
