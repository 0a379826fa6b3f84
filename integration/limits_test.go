package integration

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// limitsConfig is a profile with small limits, so that a runaway command
// inside can never take this shared machine.
const limitsConfig = `[profiles.lim]
image = "debian"
limits.memory = "768MiB"
limits.processes = 256
limits.open_files = 4096
`

// hostProbe times a fixed host command (fifty fork+execs of /bin/true).
func hostProbe(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := exec.Command("/bin/sh", "-c", "for i in $(seq 50); do /bin/true; done").CombinedOutput(); err != nil {
		t.Fatalf("host probe: %v %s", err, out)
	}
	return time.Since(start)
}

// hostBaseline is the slowest of three host probes before the scenario.
func hostBaseline(t *testing.T) time.Duration {
	var worst time.Duration
	for i := 0; i < 3; i++ {
		if d := hostProbe(t); d > worst {
			worst = d
		}
	}
	return worst
}

// assertHostResponsive fails unless the host probe completes within a
// generous factor of its baseline (a correctness bound, not a benchmark:
// the machine is shared).
func assertHostResponsive(t *testing.T, what string, base time.Duration) {
	t.Helper()
	bound := 10*base + 2*time.Second
	if d := hostProbe(t); d > bound {
		t.Errorf("during %s a host command took %v, over %v (baseline %v): the host is not protected", what, d, bound, base)
	} else {
		t.Logf("during %s the host probe took %v (baseline %v)", what, d, base)
	}
}

// background starts a lazaret CLI as the test user and returns its
// result once it exits.
func background(t *testing.T, dir string, args ...string) (*exec.Cmd, <-chan result) {
	t.Helper()
	e := need(t)
	c := e.cmd(dir, nil, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		c.Wait()
		done <- result{out.String(), errb.String(), c.ProcessState.ExitCode()}
	}()
	return c, done
}

// domainLimits reads the `limits` entry of the Domain of workspace ws from
// `lazaret status --json`.
func domainLimits(t *testing.T, ws string) (memUsed, memLimit, tasks, taskLimit float64, ok bool) {
	t.Helper()
	r := lz(t, ws, nil, "status", "--json")
	var docs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &docs); err != nil {
		t.Fatalf("status --json: %v: %s %s", err, r.stdout, r.stderr)
	}
	for _, d := range docs {
		if d["workspace"] != ws || d["state"] != "running" {
			continue
		}
		l, _ := d["limits"].(map[string]any)
		m, _ := l["memory"].(map[string]any)
		p, _ := l["processes"].(map[string]any)
		memUsed, _ = m["used_bytes"].(float64)
		memLimit, _ = m["limit_bytes"].(float64)
		tasks, _ = p["tasks"].(float64)
		taskLimit, _ = p["limit"].(float64)
		return memUsed, memLimit, tasks, taskLimit, true
	}
	return 0, 0, 0, 0, false
}

// TestSpec31ResourceLimits (spec §3.1 system boundaries, SR-1: the
// agent's processes run in the sandbox, not on the host): limits.processes
// and limits.open_files are the guest's rlimits; a fork bomb inside ends
// with the sandbox's forks failing while the host stays responsive, a
// second Domain of the same user starts and runs, and the first Domain
// stays usable; a memory hog that allocates without bound gets the
// sandbox stopped at limits.memory with the reason on the session's
// standard error, while the host and a second Domain carry on, and the
// next run starts a fresh generation. Nothing is left behind.
//
// It runs alone (not parallel(t)): its proof that the host stays
// responsive compares a host probe against a baseline taken before the
// scenario, so beside other scenarios it would measure their load, not
// the fork bomb's or the memory hog's; and a fork bomb at the limit on a
// two-core machine starves the others' bounded waits.
func TestSpec31ResourceLimits(t *testing.T) {
	e := need(t)
	ws, ws2 := workspace(t), workspace(t)
	cfg := userConfig(t, e, limitsConfig)
	run := func(dir string, argv ...string) result {
		t.Helper()
		return lzFor(t, 4*time.Minute, dir, nil, nil, append([]string{"run", "--config", cfg, "-p", "lim", "--"}, argv...)...)
	}
	base := hostBaseline(t)

	// A holder session keeps the first Domain up across the scenario.
	holder, holderDone := background(t, ws, "run", "--config", cfg, "-p", "lim", "--", "sleep", "900")
	defer func() {
		holder.Process.Signal(syscall.SIGTERM) // the CLI this test started, by its pid
		select {
		case <-holderDone:
		case <-time.After(30 * time.Second):
			holder.Process.Kill()
		}
	}()

	r := run(ws, "bash", "-c", "ulimit -Su; ulimit -Hu; ulimit -Sn; ulimit -Hn")
	if r.code != 0 || strings.Fields(r.stdout) == nil || strings.Join(strings.Fields(r.stdout), " ") != "256 256 4096 4096" {
		t.Fatalf("guest rlimits: code %d stdout %q stderr %q; want processes 256 and open files 4096, soft and hard", r.code, r.stdout, r.stderr)
	}
	if _, memLimit, _, taskLimit, ok := domainLimits(t, ws); !ok || memLimit != 768<<20 || taskLimit != 256 {
		t.Fatalf("status limits: memory limit %v, task limit %v, found %v", memLimit, taskLimit, ok)
	}

	// Fork bomb: bash pipelines that stop forking after 15 seconds (bash's
	// SECONDS carries into subshells), so the tree collapses by itself;
	// timeout's KILL of its process group is the backstop. (A group kill
	// alone can miss tasks forked while it is delivered: they go on
	// holding the count until the Domain stops.)
	_, bombDone := background(t, ws, "run", "--config", cfg, "-p", "lim", "--", "bash", "-c",
		`timeout -s KILL 90 bash -c 'bomb(){ [ $SECONDS -lt 15 ] && { bomb | bomb; }; }; bomb'; echo bomb-ended`)
	peak := 0.0
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && peak < 200 {
		if _, _, tasks, _, ok := domainLimits(t, ws); ok && tasks > peak {
			peak = tasks
		}
		time.Sleep(time.Second)
	}
	if peak < 200 {
		t.Errorf("the fork bomb reached only %v guest tasks: not a test of the limit", peak)
	}
	if peak > 256+16 {
		t.Errorf("the fork bomb reached %v guest tasks, over limits.processes 256", peak)
	}
	assertHostResponsive(t, "the fork bomb", base)
	if r := run(ws2, "echo", "second-domain-ok"); r.code != 0 || strings.TrimSpace(r.stdout) != "second-domain-ok" {
		t.Errorf("a second Domain during the fork bomb: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	var br result
	select {
	case br = <-bombDone:
	case <-time.After(3 * time.Minute):
		t.Fatal("the fork bomb session did not end")
	}
	if !strings.Contains(br.stdout, "bomb-ended") || !strings.Contains(br.stderr, "Resource temporarily unavailable") {
		t.Errorf("fork bomb session: code %d stdout %q; want its forks refused (EAGAIN) and the session to end; stderr tail %q", br.code, br.stdout, tail(br.stderr, 300))
	}
	// timeout exits as soon as it has sent the KILL; the killed tasks
	// exit (and give their count back) just after.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		_, _, tasks, _, ok := domainLimits(t, ws)
		if ok && tasks < 32 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fork bomb's tasks did not go away: %v left", tasks)
		}
	}
	if r := run(ws, "echo", "first-domain-ok"); r.code != 0 || strings.TrimSpace(r.stdout) != "first-domain-ok" {
		t.Fatalf("the first Domain after the fork bomb: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	// Memory hog: 100 MiB at a time up to 20 GiB (never reached).
	_, hogDone := background(t, ws, "run", "--config", cfg, "-p", "lim", "--", "python3", "-c",
		"c=[]\nfor i in range(200):\n    c.append(bytearray(100<<20))\n    print(i, flush=True)\n")
	time.Sleep(3 * time.Second)
	assertHostResponsive(t, "the memory hog", base)
	if r := run(ws2, "echo", "second-domain-ok"); r.code != 0 || strings.TrimSpace(r.stdout) != "second-domain-ok" {
		t.Errorf("a second Domain during the memory hog: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	var hr result
	select {
	case hr = <-hogDone:
	case <-time.After(3 * time.Minute):
		t.Fatal("the memory hog session did not end")
	}
	chunks := strings.Count(hr.stdout, "\n")
	if hr.code != 137 || !strings.Contains(hr.stderr, "limits.memory") || chunks >= 20 {
		t.Fatalf("memory hog: code %d after %d chunks of 100 MiB, stderr %q; want the sandbox stopped at 768 MiB with the reason", hr.code, chunks, tail(hr.stderr, 400))
	}
	t.Logf("memory hog stopped after %d chunks: %s", chunks, strings.TrimSpace(hr.stderr))
	// The holder's sandbox was the one stopped: its session ends too.
	select {
	case r := <-holderDone:
		if r.code == 0 {
			t.Errorf("the holder session of the stopped sandbox exited 0")
		}
	case <-time.After(time.Minute):
		t.Fatal("the holder session outlived its stopped sandbox")
	}
	if r := run(ws, "echo", "after-ok"); r.code != 0 || strings.TrimSpace(r.stdout) != "after-ok" {
		t.Fatalf("the next run after the memory limit: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)
}
