package config

import (
	"regexp"
	"testing"
)

// TestNameMatchersAreTheRegularExpressions: the written-out matchers accept
// exactly what the regular expressions they replace accept.
func TestNameMatchersAreTheRegularExpressions(t *testing.T) {
	env := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	user := regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,30}$`)
	alphabet := []string{"a", "z", "A", "Z", "_", "-", "0", "9", " ", "=", ".", "é", "\x00", "\n"}
	var inputs []string
	var grow func(prefix string, n int)
	grow = func(prefix string, n int) {
		inputs = append(inputs, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(prefix+c, n-1)
		}
	}
	grow("", 3)
	for _, n := range []int{29, 30, 31, 32, 40} {
		for _, head := range []string{"a", "_", "0", "-"} {
			s := head
			for len(s) < n {
				s += "b"
			}
			inputs = append(inputs, s, s[:len(s)-1]+"-", s[:len(s)-1]+"9", s[:len(s)-1]+"B")
		}
	}
	for _, s := range inputs {
		if got, want := validEnvName(s), env.MatchString(s); got != want {
			t.Errorf("validEnvName(%q) = %v, the expression says %v", s, got, want)
		}
		if got, want := validUserName(s), user.MatchString(s); got != want {
			t.Errorf("validUserName(%q) = %v, the expression says %v", s, got, want)
		}
	}
}
