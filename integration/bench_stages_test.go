//go:build lazaret_bench

package integration

import (
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// stage is one start-up stage of a cold `lazaret run`, as LAZARET_DEBUG=timing
// prints it: the median offset from the CLI's start over the runs.
type stage struct {
	Role    string    `json:"role"`
	Stage   string    `json:"stage"`
	AtMS    float64   `json:"median_at_ms"`
	StepMS  float64   `json:"median_step_ms"`
	RunsAt  []float64 `json:"runs_at_ms"`
	Present int       `json:"runs_present"`
}

// benchStages runs a cold `lazaret run -p tiny -- true` runs times with
// LAZARET_DEBUG=timing and returns each stage's median offset, in the
// order of the medians.
func benchStages(t *testing.T, e *env, ws, lazaret string, runs int) []stage {
	t.Helper()
	type key struct{ role, stage string }
	at := map[key][]float64{}
	step := map[key][]float64{}
	for i := 0; i < runs; i++ {
		c := exec.Command(lazaret, "run", "-p", "tiny", "--", "true")
		c.Dir = ws
		c.Env = append(userEnv(e), "LAZARET_DEBUG=timing")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("timed run: %v\n%s", err, stderr.String())
		}
		table := false
		for _, line := range strings.Split(stderr.String(), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "AT" && f[1] == "ms" {
				table = true
				continue
			}
			if !table || len(f) < 4 {
				continue
			}
			a, err1 := strconv.ParseFloat(f[0], 64)
			s, err2 := strconv.ParseFloat(f[1], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("timing table line %q", line)
			}
			k := key{f[2], strings.Join(f[3:], " ")}
			at[k] = append(at[k], a)
			step[k] = append(step[k], s)
		}
		if !table {
			t.Fatalf("LAZARET_DEBUG=timing printed no stage table:\n%s", stderr.String())
		}
		noLeftovers(t)
	}
	var out []stage
	for k, v := range at {
		out = append(out, stage{Role: k.role, Stage: k.stage, AtMS: median(v), StepMS: median(step[k]), RunsAt: v, Present: len(v)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AtMS < out[j].AtMS })
	return out
}

func printStages(stages []stage, runs int) {
	fmt.Printf("\ncold start stages (lazaret run -p tiny -- true, LAZARET_DEBUG=timing, median of %d)\n", runs)
	fmt.Printf("%8s %8s  %-4s %s\n", "at ms", "step ms", "role", "stage")
	for _, s := range stages {
		fmt.Printf("%8.1f %8.1f  %-4s %s\n", s.AtMS, s.StepMS, s.Role, s.Stage)
	}
}
