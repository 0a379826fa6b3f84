package suggest

import "testing"

// TestNearest: a prefix, an abbreviation or a near misspelling finds
// the name meant; a far or too short one finds none.
func TestNearest(t *testing.T) {
	names := []string{"profile", "p", "linger", "tty", "T", "publish", "dir", "C"}
	for in, want := range map[string]string{
		"lingr":   "linger",  // abbreviation
		"ling":    "linger",  // prefix
		"profiel": "profile", // two edits
		"pub":     "publish",
		"zz":      "",
		"x":       "",
		"linger":  "", // itself: not a misspelling
		"qwerty":  "",
	} {
		if got := Nearest(names, in); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
