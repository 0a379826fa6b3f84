package ignoredbind

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func routedBy(names ...string) func(string, bool) bool {
	return func(rel string, isDir bool) bool {
		for _, n := range names {
			if rel == n || strings.HasPrefix(rel, n+"/") {
				return true
			}
		}
		return false
	}
}

func hostDirs(dirs ...string) func(string) bool {
	return func(rel string) bool {
		if rel == "" {
			return true
		}
		for _, d := range dirs {
			if d == rel {
				return true
			}
		}
		return false
	}
}

func TestDecide(t *testing.T) {
	binds, dropped := Decide(Input{
		WithState: []string{"app/node_modules", ".venv", "gone/dist", "sub/.git", "build", "../x", "/abs", "a//b"},
		Patterns:  []string{"node_modules", ".venv", "target", ".git", "notignored"},
		Routed:    routedBy("app/node_modules", ".venv", "gone/dist", "sub/.git", "build", "node_modules", "target", ".git"),
		HostDir:   hostDirs("app"),
	})
	want := []Bind{{Rel: ".venv"}, {Rel: "app/node_modules"}, {Rel: "build"}, {Rel: "node_modules", Create: true}, {Rel: "target", Create: true}}
	if !reflect.DeepEqual(binds, want) {
		t.Fatalf("binds = %+v, want %+v", binds, want)
	}
	reasons := map[string]string{}
	for _, d := range dropped {
		reasons[d.Rel] = d.Reason
	}
	wantDropped := map[string]string{
		"../x": ReasonInvalid, "/abs": ReasonInvalid, "a//b": ReasonInvalid,
		".git": ReasonGit, "sub/.git": ReasonGit,
		"notignored": ReasonNotRouted, "gone/dist": ReasonNoParent,
	}
	if !reflect.DeepEqual(reasons, wantDropped) {
		t.Fatalf("dropped = %v, want %v", reasons, wantDropped)
	}
}

func TestDecideReserved(t *testing.T) {
	binds, dropped := Decide(Input{
		WithState: []string{".vscode", "tools/.idea/cache", "out"},
		Patterns:  []string{"tools"},
		Routed:    func(string, bool) bool { return true },
		HostDir:   func(string) bool { return true },
		Reserved:  []string{".vscode", "tools/.idea"},
	})
	if len(binds) != 1 || binds[0].Rel != "out" || len(dropped) != 3 {
		t.Fatalf("binds %v dropped %v", binds, dropped)
	}
	for _, d := range dropped {
		if d.Reason != ReasonReserved {
			t.Errorf("%s dropped for %q", d.Rel, d.Reason)
		}
	}
}

func TestDecideNestedAndLimit(t *testing.T) {
	var state []string
	for i := 0; i < MaxBinds+5; i++ {
		state = append(state, fmt.Sprintf("d%03d", i))
	}
	// A candidate beneath another (a sticky parent with a state copy of a
	// child named by a pattern cannot happen from one scan, but Decide
	// must not bind both).
	state = append(state, "d000/inner")
	binds, dropped := Decide(Input{WithState: state, Routed: func(string, bool) bool { return true }, HostDir: func(string) bool { return true }})
	if len(binds) != MaxBinds {
		t.Fatalf("%d binds, want %d", len(binds), MaxBinds)
	}
	n := map[string]int{}
	for _, d := range dropped {
		n[d.Reason]++
	}
	if n[ReasonNested] != 1 || n[ReasonLimit] != 5 || len(dropped) != 6 {
		t.Fatalf("dropped %v", dropped)
	}
	if binds[MaxBinds-1].Rel != fmt.Sprintf("d%03d", MaxBinds-1) {
		t.Fatalf("last bind %s", binds[MaxBinds-1].Rel)
	}
}

func TestDecideNothingWithoutPredicates(t *testing.T) {
	binds, dropped := Decide(Input{Patterns: []string{"node_modules"}})
	if len(binds) != 0 || len(dropped) != 1 || dropped[0].Reason != ReasonNotRouted {
		t.Fatalf("binds %v dropped %v", binds, dropped)
	}
}

func TestValid(t *testing.T) {
	for rel, want := range map[string]bool{"a": true, "a/b": true, ".venv": true, "": false, ".": false, "..": false, "a/../b": false, "a/": false, "/a": false, "a/./b": false, "a\x00": false} {
		if Valid(rel) != want {
			t.Errorf("Valid(%q) = %v", rel, !want)
		}
	}
}
