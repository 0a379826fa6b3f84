package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupRunscFiltersPrecompiled: the runsc that `make setup` builds
// carries its seccomp programs precompiled (scripts/runsc-seccomp), so
// neither the sandbox nor the gofer compiles a filter when a Domain starts.
// runsc says which it did in its debug log; a wrapper adds the debug flags
// to the pinned runsc for one cold `lazaret run`.
func TestSetupRunscFiltersPrecompiled(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	logs := e.userDir("runsc-debug-" + randHex(3))
	wrapper := runscWrapper(t, e, logs, fmt.Sprintf("exec %s --debug --debug-log=%s/%%COMMAND%%.log \"$@\"", e.runsc, logs))
	r := lzEnv(t, ws, []string{"LAZARET_RUNSC=" + wrapper}, nil, "run", "-p", "tiny", "--", "true")
	if r.code != 0 {
		t.Fatalf("run with runsc debug logs: exit %d\n%s", r.code, r.stderr)
	}
	for _, role := range []string{"boot", "gofer"} {
		b, err := os.ReadFile(filepath.Join(logs, role+".log"))
		if err != nil {
			t.Fatalf("runsc's %s debug log: %v", role, err)
		}
		log := string(b)
		if strings.Contains(log, "No precompiled program found") || !strings.Contains(log, "Loaded precompiled seccomp instructions") {
			var lines []string
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(strings.ToLower(l), "precompiled") {
					lines = append(lines, l)
				}
			}
			t.Errorf("runsc %s compiled its seccomp filter at start instead of loading a precompiled one: %s is not the runsc `make setup` builds (scripts/setup.sh build_runsc; run `make setup`). Its log:\n%s", role, e.runsc, strings.Join(lines, "\n"))
		}
	}
}

// runscWrapper writes dir/runsc, a shell script with body that stands for
// the pinned runsc (LAZARET_RUNSC=…) to add flags or a delay around it —
// fault injection and diagnostics only, the real runsc always runs — and
// returns its path.
func runscWrapper(t *testing.T, e *env, dir, body string) string {
	t.Helper()
	wrapper := filepath.Join(dir, "runsc")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}
