package prepared

import (
	"regexp"
	"testing"
)

// TestValidIDIsTheRegularExpression: ValidID accepts exactly what
// ^pl-[0-9a-f]{32}$ accepts.
func TestValidIDIsTheRegularExpression(t *testing.T) {
	re := regexp.MustCompile(`^pl-[0-9a-f]{32}$`)
	good := ArtifactID("sha256:0123")
	inputs := []string{"", "pl-", "pl", good, good + "0", good[:len(good)-1], "PL-" + good[3:], "px-" + good[3:], "xpl-" + good[3:34]}
	for i := 3; i < len(good); i++ {
		for _, c := range []string{"0", "9", "a", "f", "g", "A", "F", "-", " ", "é"} {
			inputs = append(inputs, good[:i]+c+good[i+1:])
		}
	}
	for _, s := range inputs {
		if got, want := ValidID(s), re.MatchString(s); got != want {
			t.Errorf("ValidID(%q) = %v, the expression says %v", s, got, want)
		}
	}
	if !ValidID(good) {
		t.Errorf("ValidID(%q) = false", good)
	}
}
