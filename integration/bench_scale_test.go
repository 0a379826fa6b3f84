//go:build lazaret_bench

package integration

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var flagScale = flag.Int("bench-scale", 20, "Domains started at once by TestBenchScale")

// scaleReport is TestBenchScale's result.
type scaleReport struct {
	When        time.Time          `json:"when"`
	Commit      string             `json:"commit"`
	Domains     int                `json:"domains"`
	Started     int                `json:"started"`
	StartMS     []float64          `json:"start_ms"`
	MedianMS    float64            `json:"start_median_ms"`
	P95MS       float64            `json:"start_p95_ms"`
	RSSMiB      map[string]float64 `json:"rss_mib_per_domain_by_process"`
	PSSMiB      map[string]float64 `json:"pss_mib_per_domain_by_process"`
	RSSTotalMiB float64            `json:"rss_mib_per_domain"`
	PSSTotalMiB float64            `json:"pss_mib_per_domain"`
	// RSSProcessSumMiB is the RSS of every process summed, an address
	// space shared by several processes counted once for each (the
	// figure of reports before this field).
	RSSProcessSumMiB float64 `json:"rss_mib_per_domain_process_sum"`
}

// TestBenchScale starts -bench-scale Domains at once (one workspace each,
// the default profile), each held by one session, and reports how many
// started, the start time to the session's first output (median, p95), and
// the memory of an idle Domain by process kind (RSS and PSS, averaged over
// the Domains): the session's CLI, HC, RS and everything below them, each
// address space counted once (see userMemoryByKind); the RSS summed over
// processes, which counts the sandbox's shared stub address spaces once per
// stub, is reported beside it. Target: 20 of 20, RSS ≤ 150 MiB.
func TestBenchScale(t *testing.T) {
	e := need(t)
	n := *flagScale
	if n > 4 {
		expectManyDomains(t)
	}
	// Warm: the default image's prepared lower exists.
	warm := workspace(t)
	if r := lzFor(t, 5*time.Minute, warm, nil, nil, "run", "--", "true"); r.code != 0 {
		t.Fatalf("warm-up: %d\n%s", r.code, r.stderr)
	}
	noLeftovers(t)
	type held struct {
		stdin io.WriteCloser
		wait  func() error
	}
	var mu sync.Mutex
	var holds []held
	var starts []float64
	var failures []string
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		ws := workspace(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.cmd(ws, nil, "run", "--", "sh", "-c", "echo up; exec cat")
			in, _ := c.StdinPipe()
			out, _ := c.StdoutPipe()
			var stderr strings.Builder
			c.Stderr = &stderr
			begin := time.Now()
			if err := c.Start(); err != nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
				return
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			took := time.Since(begin)
			mu.Lock()
			defer mu.Unlock()
			holds = append(holds, held{in, c.Wait})
			if err != nil || line != "up\n" {
				failures = append(failures, fmt.Sprintf("%q %v %s", line, err, stderr.String()))
				return
			}
			starts = append(starts, ms(took))
		}()
	}
	wg.Wait()
	rep := scaleReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"), Domains: n, Started: len(starts), StartMS: starts,
		RSSMiB: map[string]float64{}, PSSMiB: map[string]float64{}}
	if len(starts) > 0 {
		sort.Float64s(starts)
		rep.MedianMS = median(starts)
		rep.P95MS = starts[(len(starts)*95+99)/100-1]
	}
	// Idle memory, by process kind, of every process of the test user.
	time.Sleep(2 * time.Second)
	rss, pss, processSum := userMemoryByKind(t, e.uid)
	rep.RSSProcessSumMiB = processSum / float64(max(len(starts), 1))
	for k, v := range rss {
		rep.RSSMiB[k] = v / float64(max(len(starts), 1))
		rep.RSSTotalMiB += rep.RSSMiB[k]
	}
	for k, v := range pss {
		rep.PSSMiB[k] = v / float64(max(len(starts), 1))
		rep.PSSTotalMiB += rep.PSSMiB[k]
	}
	for _, h := range holds {
		h.stdin.Close()
	}
	for _, h := range holds {
		h.wait()
	}
	// Teardowns finish after the CLIs exit.
	deadline := time.Now().Add(2 * time.Minute)
	for leftovers(e) != "" && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	noLeftovers(t)

	fmt.Printf("\n%d Domains started at once (default profile): %d of %d started; start to first output median %.0f ms, p95 %.0f ms (target: %d of %d)\n",
		n, rep.Started, n, rep.MedianMS, rep.P95MS, n, n)
	kinds := make([]string, 0, len(rep.RSSMiB))
	for k := range rep.RSSMiB {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Printf("idle memory per Domain (average over the %d, each address space once): RSS %.1f MiB (target <= 150), PSS %.1f MiB\n", rep.Started, rep.RSSTotalMiB, rep.PSSTotalMiB)
	fmt.Printf("  RSS summed over processes, a shared address space once per process: %.1f MiB\n", rep.RSSProcessSumMiB)
	for _, k := range kinds {
		fmt.Printf("  %-22s RSS %6.1f MiB  PSS %6.1f MiB\n", k, rep.RSSMiB[k], rep.PSSMiB[k])
	}
	if *flagBenchOut != "" {
		os.MkdirAll(*flagBenchOut, 0o755)
		js, _ := json.MarshalIndent(rep, "", "  ")
		os.WriteFile(filepath.Join(*flagBenchOut, "scale-latest.json"), js, 0o644)
	}
	recordBench(t, "scale", "", rep)
	if len(failures) > 0 {
		t.Errorf("%d of %d Domains did not start:\n%s", len(failures), n, strings.Join(failures, "\n"))
	}
}

// userMemoryByKind sums VmRSS and Pss (MiB) of uid's processes by kind,
// each address space once: the executable's name, with runsc's sandbox and
// gofer told apart and hidden roles named (the Git-routing daemon RS runs
// from lazaret-gitroute: "lazaret-gitroute git-routing"). "exe" are the sandbox's systrap
// stub processes holding the guest's address spaces (the sandbox init's,
// the session's): gVisor holds one address space in several stub
// processes made with CLONE_VM (measured: three share the init's, two the
// session's), and each reports the whole address space's RSS and PSS, as
// the threads of one process would if they were counted one by one.
// processSum is the RSS of every process summed, shared address spaces
// included once per process.
func userMemoryByKind(t *testing.T, uid int) (rss, pss map[string]float64, processSum float64) {
	t.Helper()
	rss, pss = map[string]float64{}, map[string]float64{}
	var counted []int // a process of each address space counted so far
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || !strings.Contains(string(status), fmt.Sprintf("\nUid:\t%d\t", uid)) {
			continue
		}
		resident := kbField(string(status), "VmRSS:") / 1024
		processSum += resident
		if sharesAddressSpace(t, pid, counted) {
			continue
		}
		counted = append(counted, pid)
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		argv := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		kind := filepath.Base(argv[0])
		if argv[0] == "" { // no command line (e.g. it was rewritten): the comm name
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			kind = strings.TrimSpace(string(comm))
		}
		if kind == "runsc" || kind == "exe" {
			for _, a := range argv[1:] {
				switch {
				case a == "boot":
					kind = "runsc sandbox"
				case a == "gofer":
					kind = "runsc gofer"
				case a == "run" || a == "exec":
					kind = "runsc " + a + " client"
				}
			}
		}
		if role, ok := hiddenRole(argv); ok && strings.HasPrefix(kind, "lazaret") {
			kind = kind + " " + role // a hidden role (e.g. the Git-routing daemon RS runs from lazaret-gitroute)
		} else if (kind == "lazaret" || kind == "exe") && len(argv) > 1 {
			kind = kind + " " + argv[1] // a re-executed role names itself first
		}
		rss[kind] += resident
		if roll, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
			pss[kind] += kbField(string(roll), "Pss:") / 1024
		}
	}
	return rss, pss, processSum
}

// sharesAddressSpace reports whether pid shares its address space with one
// of the processes in counted (kcmp(2), KCMP_VM; the bench runs as root,
// which may compare any two processes). A process that has exited in
// between shares with none; any other failure fails the test, so that the
// figure never silently counts differently.
func sharesAddressSpace(t *testing.T, pid int, counted []int) bool {
	t.Helper()
	const kcmpVM = 1 // KCMP_VM in linux/kcmp.h
	for _, other := range counted {
		r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(pid), uintptr(other), kcmpVM, 0, 0, 0)
		switch {
		case errno == unix.ESRCH: // one of the two has exited
			continue
		case errno != 0:
			t.Fatalf("compare the address spaces of processes %d and %d (kcmp KCMP_VM): %v; the bench must run as root", pid, other, errno)
		case r == 0:
			return true
		}
	}
	return false
}

// kbField is the value in kB of the line starting with name.
func kbField(s, name string) float64 {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, name) {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v
			}
		}
	}
	return 0
}
