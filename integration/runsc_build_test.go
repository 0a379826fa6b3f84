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
	wrapper := filepath.Join(logs, "runsc")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --debug --debug-log=%s/%%COMMAND%%.log \"$@\"\n", e.runsc, logs)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
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
