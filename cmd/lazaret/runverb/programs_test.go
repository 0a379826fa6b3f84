package runverb

import (
	"reflect"
	"testing"
)

// TestConfiguredPrograms: the environment overrides the configuration's
// [programs], which is handed to the coordinator as LAZARET_<NAME>.
func TestConfiguredPrograms(t *testing.T) {
	programs := map[string]string{"runsc": "/cfg/runsc", "lazaret-rs": "/cfg/lazaret-rs"}
	env := map[string]string{"LAZARET_RUNSC": "/env/runsc"}
	getenv := func(k string) string { return env[k] }
	g := ProgramGetenv(programs, getenv)
	if g("LAZARET_RUNSC") != "/env/runsc" || g("LAZARET_RS") != "/cfg/lazaret-rs" || g("LAZARET_HC") != "" || g("HOME") != "" {
		t.Fatalf("ProgramGetenv: %q %q %q", g("LAZARET_RUNSC"), g("LAZARET_RS"), g("LAZARET_HC"))
	}
	if got := ProgramEnv(programs, getenv); !reflect.DeepEqual(got, []string{"LAZARET_RS=/cfg/lazaret-rs"}) {
		t.Fatalf("ProgramEnv: %v", got)
	}
}
