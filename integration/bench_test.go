//go:build lazaret_bench

package integration

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/modeltrace"
)

var (
	flagBenchOut = flag.String("bench-out", "", "directory for the JSON results")
	flagRuns     = flag.Int("bench-runs", 11, "runs per measurement (median reported)")
	flagTermRuns = flag.Int("bench-tty-runs", 3, "runs of each 64 MiB PTY throughput measurement")
	flagEscRuns  = flag.Int("bench-esc-runs", 101, "escalation round trips measured")
	flagSrt      = flag.String("srt", "", "srt (sandbox-runtime) executable: when set, `srt true` is measured beside the cold start (scripts/setup.sh bench-deps prints it)")
)

type measurement struct {
	Name     string    `json:"name"`
	MedianMS float64   `json:"median_ms"`
	RunsMS   []float64 `json:"runs_ms"`
}

type benchReport struct {
	When         time.Time          `json:"when"`
	Commit       string             `json:"commit"`
	Measurements []measurement      `json:"measurements"`
	Ratios       map[string]float64 `json:"ratios"`
	Stages       []stage            `json:"cold_start_stages,omitempty"`
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// asUser runs argv as the test user and returns its wall time.
func asUser(t *testing.T, e *env, dir string, argv ...string) time.Duration {
	t.Helper()
	return asUserIn(t, e, nil, dir, argv...)
}

// userEnv is the environment the bench runs the product with as the test
// user.
func userEnv(e *env) []string {
	return []string{"HOME=" + e.home, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "XDG_STATE_HOME=" + e.stateHome, "XDG_RUNTIME_DIR=" + e.runtime, "LAZARET_RUNSC=" + e.runsc}
}

// untraced drops the model trace from c: the bench joins one Domain more
// often than the model's bound on sessions per Domain, and measures time,
// not protocol (the scenarios replay the same code paths' traces).
func untraced(c *exec.Cmd) *exec.Cmd {
	env := c.Env[:0]
	for _, kv := range c.Env {
		if !strings.HasPrefix(kv, modeltrace.Env+"=") {
			env = append(env, kv)
		}
	}
	c.Env = env
	return c
}

// srtCheck runs `srt true` once as the test user and fails the bench with
// the fix when srt cannot sandbox as that user, so the comparison is never
// silently left out.
func srtCheck(t *testing.T, e *env, ws, srt string) {
	t.Helper()
	c := exec.Command(srt, "true")
	c.Dir = ws
	c.Env = []string{"HOME=" + e.home, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	out, err := c.CombinedOutput()
	if err == nil {
		return
	}
	fix := "check that scripts/setup.sh bench-deps installed bubblewrap, socat and ripgrep, and that " + srt + " is readable by the user"
	if o := string(out); strings.Contains(o, "namespace") || strings.Contains(o, "uid map") || strings.Contains(o, "Operation not permitted") || strings.Contains(o, "Permission denied") {
		fix = "srt's bubblewrap needs unprivileged user namespaces: as root run sysctl -w kernel.unprivileged_userns_clone=1 (Debian) or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu), or drop -srt"
	}
	t.Fatalf("srt true as %s fails, so the cold start cannot be compared with srt: %v\n%s\nfix: %s", *flagUser, err, out, fix)
}

// TestBench measures, in one run: bare `runsc run` of the busybox bundle in
// the same kind of user namespace vs a cold `lazaret run -- true` (and,
// with -srt, `srt true` as the same user, the three interleaved), their
// wall times and the CPU time of everything each started; and bare
// `runsc exec` vs a joining `lazaret run -- true` in a running Domain.
func TestBench(t *testing.T) {
	e := need(t)
	n := *flagRuns
	ws := workspace(t)
	lazaret := filepath.Join(e.bin, "lazaret")
	// Warm up: prepares the busybox lower once.
	asUser(t, e, ws, lazaret, "run", "-p", "tiny", "--", "true")
	noLeftovers(t)
	arts, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "prepared", "pl-*", "rootfs"))
	if len(arts) == 0 {
		t.Fatal("no prepared lower after warm-up")
	}
	rootfs := arts[0]

	// Bare runsc run: a bundle over the same prepared lower, in a user+mount+
	// net namespace with the full subordinate map, timed inside.
	bundle := e.userDir("bench-bundle")
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process":    map[string]any{"args": []string{"/bin/true"}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/bin"}},
		"root":       map[string]any{"path": "rootfs"},
		"linux":      map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
		"mounts":     []map[string]any{{"destination": "/proc", "type": "proc", "source": "proc"}},
	}
	js, _ := json.Marshal(spec)
	os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o644)
	os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755)
	os.Chown(filepath.Join(bundle, "rootfs"), e.uid, e.gid)
	// One bare run per unshare, so bare runsc, the Lazaret cold start and
	// srt interleave: a slow phase of the machine (the other cores'
	// load) weighs on all three alike.
	script := fmt.Sprintf(`set -e
mount --bind %[1]s %[2]s/rootfs; mount -o remount,bind,ro %[2]s/rootfs
ip link set lo up
usage() { while read -r k v; do if [ "$k" = usage_usec ]; then echo "$v"; fi; done < "$2/cpu.stat"; }
u0=$(usage "$@")
s=$(date +%%s%%N)
%[3]s --root=%[2]s/state --ignore-cgroups --network=sandbox --overlay2=root:memory --file-access-mounts=shared run --bundle %[2]s "bare-$1" >/dev/null
e=$(date +%%s%%N)
u1=$(usage "$@")
echo $(( (e - s) / 1000 )) $(( u1 - u0 ))`, rootfs, bundle, e.runsc)
	sub := strconv.Itoa(e.subStart) + ",1,65536"
	// bareOnce returns the wall time of runsc run and the CPU time of it
	// and its children (read in g before and after it, so the script's own
	// processes do not count).
	bareOnce := func(i int, g *cpuGroup) (wallMS, cpuMS float64) {
		c := exec.Command("unshare", "--user", "--map-user=0", "--map-group=0", "--map-users="+sub, "--map-groups="+sub, "--mount", "--net", "--propagation", "private", "sh", "-c", script, "bare", strconv.Itoa(i), g.dir)
		c.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + e.home}
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
		out, err := g.in(c).CombinedOutput()
		if err != nil {
			t.Fatalf("bare runsc run: %v\n%s", err, out)
		}
		f := strings.Fields(string(out))
		var us, cpuUS int
		if len(f) == 2 {
			us, err = strconv.Atoi(f[0])
			if err == nil {
				cpuUS, err = strconv.Atoi(f[1])
			}
		}
		if len(f) != 2 || err != nil {
			t.Fatalf("bare runsc run output (want wall and CPU microseconds): %q", out)
		}
		return float64(us) / 1000, float64(cpuUS) / 1000
	}
	srt := *flagSrt
	if srt != "" {
		srtCheck(t, e, ws, srt)
	}

	// Each run also reads the CPU time of everything it started (a cgroup
	// per run, bench_cpu_test.go): the cold start's to its CLI's exit (what
	// competes with its start) and with its teardown.
	var bareRun, cold, srtRuns, bareCPU, coldCPU, coldCPUTotal, srtCPU []float64
	for i := 0; i < n; i++ {
		g := newCPUGroup(t)
		wall, cpu := bareOnce(i, g)
		bareRun, bareCPU = append(bareRun, wall), append(bareCPU, cpu)
		g.close(t)
		g = newCPUGroup(t)
		cold = append(cold, ms(asUserIn(t, e, g, ws, lazaret, "run", "-p", "tiny", "--", "true")))
		coldCPU = append(coldCPU, g.usageMS(t))
		noLeftovers(t)
		coldCPUTotal = append(coldCPUTotal, g.usageMS(t))
		g.close(t)
		if srt != "" {
			g = newCPUGroup(t)
			srtRuns = append(srtRuns, ms(asUserIn(t, e, g, ws, srt, "true")))
			srtCPU = append(srtCPU, g.usageMS(t))
			g.close(t)
		}
	}

	stageRuns := (n + 1) / 2
	stages := benchStages(t, e, ws, lazaret, stageRuns)

	// Back to back: each cold start begins as the previous one's CLI
	// exits, as an agent harness that wraps every tool call in `lazaret
	// run` starts them, so each also waits for the previous Domain's
	// teardown (which holds the Domain lock). The first start follows an
	// idle moment and is not counted.
	var backToBack []float64
	for i := 0; i <= n; i++ {
		d := ms(asUser(t, e, ws, lazaret, "run", "-p", "tiny", "--", "true"))
		if i > 0 {
			backToBack = append(backToBack, d)
		}
	}
	noLeftovers(t)

	// A running Domain: one long session holds it; measure joins and bare
	// runsc exec into the same container.
	hold := untraced(e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo up; sleep 600"))
	stdout, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	stdout.Read(buf)
	states, _ := filepath.Glob(filepath.Join(e.runtime, "lazaret", "*", "runsc"))
	if len(states) != 1 {
		t.Fatalf("runsc state dirs: %v", states)
	}
	ids, _ := filepath.Glob(filepath.Join(states[0], "lazaret-*"))
	var cid string
	for _, id := range ids {
		base := filepath.Base(id)
		if i := strings.Index(base, "_sandbox"); i > 0 {
			cid = base[:i]
		} else if strings.HasSuffix(base, ".state") {
			cid = strings.TrimSuffix(base, ".state")
		}
	}
	if cid == "" {
		t.Fatalf("no container state in %s: %v", states[0], ids)
	}
	var bareExec, join []float64
	for i := 0; i < n; i++ {
		bareExec = append(bareExec, ms(asUser(t, e, ws, e.runsc, "--root="+states[0], "--ignore-cgroups", "exec", cid, "/bin/true")))
		join = append(join, ms(asUser(t, e, ws, lazaret, "run", "-p", "tiny", "--", "true")))
	}
	// The same on a terminal, as a developer joins: an interactive
	// `lazaret run` (a Session Terminal: host PTY, launcher, guest leader
	// identified) against bare runsc exec of a terminal process document,
	// each started on a PTY of its own and timed to its exit.
	ttyProcess := filepath.Join(e.userDir("bench-tty"), "process.json")
	os.WriteFile(ttyProcess, []byte(`{"terminal": true, "user": {"uid": 0, "gid": 0}, "args": ["/bin/true"], "env": ["PATH=/bin"], "cwd": "/"}`), 0o644)
	var bareExecTTY, joinTTY []float64
	for i := 0; i < n; i++ {
		bareExecTTY = append(bareExecTTY, timedOnPTY(t, e, ws, e.runsc, "--root="+states[0], "--ignore-cgroups", "exec", "--process", ttyProcess, cid))
		joinTTY = append(joinTTY, timedOnPTY(t, e, ws, lazaret, "run", "-p", "tiny", "--", "true"))
	}
	hold.Process.Signal(syscall.SIGTERM)
	hold.Wait()
	noLeftovers(t)

	termRuns := *flagTermRuns
	term := benchTerminal(t, e, ws, termRuns)
	noLeftovers(t)
	esc, escP99, escBase, escRT, escRTP99 := benchEscalation(t, e, ws, *flagEscRuns)
	noLeftovers(t)

	rep := benchReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"), Ratios: map[string]float64{}, Stages: stages}
	for _, m := range []measurement{
		{Name: "bare_runsc_run", RunsMS: bareRun},
		{Name: "lazaret_run_true_cold", RunsMS: cold},
		{Name: "bare_runsc_exec", RunsMS: bareExec},
		{Name: "lazaret_run_true_join", RunsMS: join},
	} {
		m.MedianMS = median(m.RunsMS)
		rep.Measurements = append(rep.Measurements, m)
	}
	for _, m := range term {
		m.MedianMS = median(m.RunsMS)
		rep.Measurements = append(rep.Measurements, m)
	}
	rep.Measurements = append(rep.Measurements, esc, escBase, escRT)
	rep.Ratios["escalation_roundtrip_p99_ms"] = escP99
	rep.Ratios["escalation_protocol_roundtrip_p99_ms"] = escRTP99
	// Throughput as a fraction of the host PTY's (time ratio inverted);
	// echo latency as the median added over the host PTY.
	rep.Ratios["pty_throughput_vs_host"] = rep.Measurements[4].MedianMS / rep.Measurements[5].MedianMS
	rep.Ratios["pty_echo_over_host_ms"] = rep.Measurements[7].MedianMS - rep.Measurements[6].MedianMS
	rep.Ratios["pty_reference_throughput_vs_host"] = rep.Measurements[4].MedianMS / rep.Measurements[8].MedianMS
	rep.Ratios["pty_runsc_one_pty_throughput_vs_host"] = rep.Measurements[4].MedianMS / rep.Measurements[9].MedianMS
	rep.Ratios["cold_start"] = rep.Measurements[1].MedianMS / rep.Measurements[0].MedianMS
	// The same per interleaved pair (cold start i over bare run i, run
	// back to back): a slow or fast phase of the machine weighs on both
	// halves of a pair, so this median moves less between bench runs than
	// the ratio of the two medians, which stays the headline.
	pairs := make([]float64, len(cold))
	for i := range cold {
		pairs[i] = cold[i] / bareRun[i]
	}
	rep.Ratios["cold_start_paired"] = median(pairs)
	if srt != "" {
		m := measurement{Name: "srt_true", RunsMS: srtRuns, MedianMS: median(srtRuns)}
		rep.Measurements = append(rep.Measurements, m)
		rep.Ratios["cold_start_vs_srt"] = rep.Measurements[1].MedianMS / m.MedianMS
	}
	rep.Ratios["join"] = rep.Measurements[3].MedianMS / rep.Measurements[2].MedianMS
	b2b := measurement{Name: "lazaret_run_true_back_to_back", RunsMS: backToBack, MedianMS: median(backToBack)}
	rep.Measurements = append(rep.Measurements, b2b)
	if srt != "" {
		rep.Ratios["back_to_back_vs_srt"] = b2b.MedianMS / median(srtRuns)
	}
	bareTTY := measurement{Name: "bare_runsc_exec_terminal", RunsMS: bareExecTTY, MedianMS: median(bareExecTTY)}
	lzTTY := measurement{Name: "lazaret_run_true_join_terminal", RunsMS: joinTTY, MedianMS: median(joinTTY)}
	rep.Measurements = append(rep.Measurements, bareTTY, lzTTY)
	rep.Ratios["join_terminal"] = lzTTY.MedianMS / bareTTY.MedianMS
	cpu := []measurement{
		{Name: "cpu_bare_runsc_run", RunsMS: bareCPU},
		{Name: "cpu_lazaret_run_true_cold_to_exit", RunsMS: coldCPU},
		{Name: "cpu_lazaret_run_true_cold_with_teardown", RunsMS: coldCPUTotal},
	}
	if srt != "" {
		cpu = append(cpu, measurement{Name: "cpu_srt_true", RunsMS: srtCPU})
	}
	for i := range cpu {
		cpu[i].MedianMS = median(cpu[i].RunsMS)
	}
	rep.Measurements = append(rep.Measurements, cpu...)
	rep.Ratios["cold_start_cpu"] = cpu[1].MedianMS / cpu[0].MedianMS
	fmt.Printf("\n%-24s %10s   (median of %d)\n", "measurement", "ms", n)
	for _, m := range rep.Measurements {
		fmt.Printf("%-24s %10.1f\n", m.Name, m.MedianMS)
	}
	fmt.Printf("cold-start ratio (lazaret run -- true / bare runsc run): %.2fx (target <= 2x); median of the %d interleaved pairs' ratios: %.2fx\n", rep.Ratios["cold_start"], len(cold), rep.Ratios["cold_start_paired"])
	if srt != "" {
		fmt.Printf("cold start vs srt (lazaret run -- true / srt true, interleaved): %.2fx (target < 1x)\n", rep.Ratios["cold_start_vs_srt"])
	} else {
		fmt.Println("srt not measured: pass -srt=$(scripts/setup.sh bench-deps) (make bench does)")
	}
	cpuLine := fmt.Sprintf("CPU per cold start (every process it started, cgroup cpu.stat): lazaret run -- true %.0f ms to its exit, %.0f ms with its teardown; bare runsc run %.0f ms",
		cpu[1].MedianMS, cpu[2].MedianMS, cpu[0].MedianMS)
	if srt != "" {
		cpuLine += fmt.Sprintf("; srt true %.0f ms", cpu[3].MedianMS)
	}
	fmt.Printf("%s; to exit / bare: %.2fx\n", cpuLine, rep.Ratios["cold_start_cpu"])
	printStages(stages, stageRuns)
	fmt.Printf("join ratio (lazaret run -- true in a running Domain / bare runsc exec): %.2fx\n", rep.Ratios["join"])
	b2bLine := fmt.Sprintf("back to back (each cold start as the previous one's CLI exits, its teardown still running; median of %d): %.1f ms", len(backToBack), b2b.MedianMS)
	if srt != "" {
		b2bLine += fmt.Sprintf(", %.2fx srt true", rep.Ratios["back_to_back_vs_srt"])
	}
	fmt.Println(b2bLine)
	fmt.Printf("interactive join ratio (the same on a terminal / bare runsc exec of a terminal process, %.1f / %.1f ms): %.2fx\n", lzTTY.MedianMS, bareTTY.MedianMS, rep.Ratios["join_terminal"])
	fmt.Printf("PTY throughput, cat of 64 MiB (host %.0f ms = %.0f MiB/s, lazaret %.0f ms = %.0f MiB/s): %.0f%% of host (target >= 50%%)\n",
		rep.Measurements[4].MedianMS, 64/(rep.Measurements[4].MedianMS/1000), rep.Measurements[5].MedianMS, 64/(rep.Measurements[5].MedianMS/1000), 100*rep.Ratios["pty_throughput_vs_host"])
	fmt.Printf("keystroke echo latency median (host %.3f ms, lazaret %.3f ms): +%.2f ms over host (target <= 5 ms)\n",
		rep.Measurements[6].MedianMS, rep.Measurements[7].MedianMS, rep.Ratios["pty_echo_over_host_ms"])
	fmt.Println(ptyReferenceLine(rep.Measurements[4].MedianMS, rep.Measurements[5].MedianMS, rep.Measurements[8].MedianMS, rep.Measurements[9].MedianMS))
	fmt.Printf("auto-approved escalation of true: protocol round trip measured by the client median %.1f ms, p99 %.1f ms (target median <= 50 ms); wall time with the client's process start median %.1f ms, p99 %.1f ms; in-sandbox /bin/true timed the same way %.1f ms\n",
		escRT.MedianMS, escRTP99, esc.MedianMS, escP99, escBase.MedianMS)
	if *flagBenchOut != "" {
		os.MkdirAll(*flagBenchOut, 0o755)
		js, _ := json.MarshalIndent(rep, "", "  ")
		f := filepath.Join(*flagBenchOut, "bench-"+rep.When.Format("20060102T150405Z")+".json")
		os.WriteFile(f, js, 0o644)
		os.WriteFile(filepath.Join(*flagBenchOut, "latest.json"), js, 0o644)
		fmt.Printf("written %s\n", f)
	}
	recordBench(t, "startup", "ms", rep)
}

// timedOnPTY runs argv as the test user on a PTY of its own and returns
// the milliseconds from its start to its exit, which must be a success.
func timedOnPTY(t *testing.T, e *env, ws string, argv ...string) float64 {
	t.Helper()
	start := time.Now()
	p := startOnPTY(t, e, ws, nil, argv...)
	out := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.m); out <- b }() // until the slave's last holder is gone
	err := p.cmd.Wait()
	d := time.Since(start)
	p.m.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := <-out
	p.m.Close()
	if err != nil {
		t.Fatalf("%v on a terminal: %v\n%s", argv, err, b)
	}
	return ms(d)
}
