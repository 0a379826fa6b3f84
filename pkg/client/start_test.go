package client

import (
	"slices"
	"testing"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/locate"
)

// TestCoordinatorEnvPassesProgramOverrides: a coordinator locates every
// program of [programs] but itself (the CLI locates lazaret-hc), so it gets
// each one's LAZARET_<NAME> override from the CLI's environment (the CLI
// also hands it the configured paths that way, runverb.ProgramEnv), and
// nothing else of that environment beyond the variables it reads.
func TestCoordinatorEnvPassesProgramOverrides(t *testing.T) {
	var environ, want []string
	for _, name := range config.ProgramNames {
		if name == locate.HC {
			continue
		}
		kv := locate.EnvVar(name) + "=/opt/" + name
		environ, want = append(environ, kv), append(want, kv)
	}
	environ = append(environ, "LAZARET_HC=/opt/lazaret-hc", "SECRET_TOKEN=x", "LD_PRELOAD=/tmp/x.so")
	got := coordinatorEnv(environ)
	if !slices.Equal(got, want) {
		t.Fatalf("coordinatorEnv = %v, want %v", got, want)
	}
}
