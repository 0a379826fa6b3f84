// Package linkcheck is the test helper behind the binaries' "links no …"
// tests (cmd/lazaret-hc, cmd/lazaret-escalate, cmd/lazaret-init): it lists
// what a main package links with `go list -deps` and reports every
// dependency a forbidden rule names.
package linkcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// Violation is one linked package and the rule that forbids it.
type Violation struct {
	Dep, Rule string
}

// Forbidden returns the packages pkg (a directory or import path) links
// that a rule forbids. A rule forbids the package it names and those below
// it; a rule ending in "/" forbids every path with that prefix. It fails t
// when the go command cannot list the dependencies.
func Forbidden(t testing.TB, pkg string, rules []string) []Violation {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps %s printed only %d packages: %q", pkg, len(deps), out)
	}
	var vs []Violation
	for _, d := range deps {
		for _, r := range rules {
			if Matches(d, r) {
				vs = append(vs, Violation{d, r})
			}
		}
	}
	return vs
}

// Matches reports whether rule forbids the import path dep.
func Matches(dep, rule string) bool {
	if strings.HasSuffix(rule, "/") {
		return strings.HasPrefix(dep, rule)
	}
	return dep == rule || strings.HasPrefix(dep, rule+"/")
}
