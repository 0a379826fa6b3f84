package shellquote

import (
	"os/exec"
	"testing"
)

// TestWordRoundTrips: sh reads each quoted word back as the word.
func TestWordRoundTrips(t *testing.T) {
	for _, w := range []string{"/src/app", "/src/my app", "it's", "", "$HOME", "a\nb", "--x=1", "*"} {
		out, err := exec.Command("sh", "-c", "printf %s "+Word(w)).Output()
		if err != nil || string(out) != w {
			t.Errorf("Word(%q) = %s: sh read %q (%v)", w, Word(w), out, err)
		}
	}
	if Word("/src/app") != "/src/app" {
		t.Errorf("a plain path is quoted: %s", Word("/src/app"))
	}
}
