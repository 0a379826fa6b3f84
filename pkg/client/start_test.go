package client

import (
	"slices"
	"testing"
	"time"

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
	got := CoordinatorEnv(environ)
	if !slices.Equal(got, want) {
		t.Fatalf("CoordinatorEnv = %v, want %v", got, want)
	}
}

// TestLockWaitBacksOff: a held Domain lock is polled every 2 ms for the
// first 100 ms of the wait (a teardown's length), every 20 ms after.
func TestLockWaitBacksOff(t *testing.T) {
	for _, c := range []struct{ waited, want time.Duration }{
		{0, 2 * time.Millisecond},
		{99 * time.Millisecond, 2 * time.Millisecond},
		{100 * time.Millisecond, 20 * time.Millisecond},
		{time.Minute, 20 * time.Millisecond},
	} {
		if got := lockWait(c.waited); got != c.want {
			t.Errorf("after %v: wait %v, want %v", c.waited, got, c.want)
		}
	}
}
