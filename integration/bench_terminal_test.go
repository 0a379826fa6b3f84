//go:build lazaret_bench

package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// echoLatencies writes one byte at a time and measures until it comes back.
func (p *ptyProc) echoLatencies(t *testing.T, n int) []float64 {
	t.Helper()
	var out []float64
	b := make([]byte, 256)
	for i := 0; i < n; i++ {
		c := byte('a' + i%26)
		start := time.Now()
		if _, err := p.m.Write([]byte{c}); err != nil {
			t.Fatal(err)
		}
		p.m.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			k, err := p.m.Read(b)
			if err != nil {
				t.Fatalf("echo %d: %v", i, err)
			}
			if bytes.IndexByte(b[:k], c) >= 0 {
				break
			}
		}
		out = append(out, float64(time.Since(start).Microseconds())/1000)
	}
	return out
}

// benchTerminal measures interactive-session PTY throughput (cat of a 64 MiB
// text file to the terminal) and keystroke echo latency (a raw-mode cat in
// the guest echoing each byte), each against the same program on a plain
// host PTY in the same run, and the PTY reference (bench_ptyref_test.go)
// for throughput. The lazaret sessions join a Domain held by a background
// session, so start-up is not measured.
func benchTerminal(t *testing.T, e *env, ws string, runs int) []measurement {
	const size = 64 << 20
	big := filepath.Join(ws, "big.txt")
	line := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-lazaret-pty-bench\n"), 1)
	data := bytes.Repeat(line, size/len(line)+1)[:size]
	if err := os.WriteFile(big, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(big)
	os.Chown(big, e.uid, e.gid)
	lazaret := filepath.Join(e.bin, "lazaret")

	hold := untraced(e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo up; sleep 600"))
	stdout, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		hold.Process.Signal(syscall.SIGTERM) // the holder this harness started
		hold.Wait()
	}()
	stdout.Read(make([]byte, 3))

	catScript := "echo S-T-A-R-T; cat %s; echo E-N-D"
	timeCat := func(p *ptyProc) float64 {
		defer p.end(t)
		t0, _ := p.until(t, "S-T-A-R-T", 2*time.Minute)
		t1, n := p.until(t, "E-N-D", 5*time.Minute)
		if n < size {
			t.Fatalf("%v: read %d bytes, want ≥ %d", p.cmd.Args, n, size)
		}
		return float64(t1.Sub(t0).Microseconds()) / 1000
	}
	throughput := func(argv ...string) float64 { return timeCat(startOnPTY(t, e, ws, nil, argv...)) }
	ref := startPTYReference(t, e, ws)
	guestCat := fmt.Sprintf(catScript, "/workspace/big.txt")
	var hostCat, lzCat, refCat, onePTYCat []float64
	for i := 0; i < runs; i++ {
		hostCat = append(hostCat, throughput("sh", "-c", fmt.Sprintf(catScript, big)))
		lzCat = append(lzCat, throughput(lazaret, "run", "-p", "tiny", "--", "sh", "-c", guestCat))
		refCat = append(refCat, timeCat(startOnPTYAs(t, e, nil, ws, ref.env(), ref.argv(t, guestCat)...)))
		// gVisor alone: the same runsc exec straight on the harness's
		// PTY, with no relay and no second PTY.
		onePTYCat = append(onePTYCat, timeCat(startOnPTYAs(t, e, nil, ws, nil, ref.execArgv(t, guestCat)...)))
	}
	ref.stop()

	echoScript := "stty raw -echo; echo R-E-A-D-Y; exec cat"
	echo := func(argv ...string) []float64 {
		p := startOnPTY(t, e, ws, nil, argv...)
		defer p.end(t)
		p.until(t, "R-E-A-D-Y", 2*time.Minute)
		time.Sleep(200 * time.Millisecond)
		p.echoLatencies(t, 20) // warm-up
		return p.echoLatencies(t, 200)
	}
	hostEcho := echo("sh", "-c", echoScript)
	lzEcho := echo(lazaret, "run", "-p", "tiny", "--", "sh", "-c", echoScript)
	return []measurement{
		{Name: "host_pty_cat_64MiB", RunsMS: hostCat},
		{Name: "lazaret_pty_cat_64MiB", RunsMS: lzCat},
		{Name: "host_pty_echo", RunsMS: hostEcho},
		{Name: "lazaret_pty_echo", RunsMS: lzEcho},
		{Name: "pty_reference_runsc_relay_cat_64MiB", RunsMS: refCat},
		{Name: "pty_runsc_exec_one_pty_cat_64MiB", RunsMS: onePTYCat},
	}
}

// TestBenchTerminal runs only the terminal part of TestBench (PTY
// throughput and echo latency, each against a plain host PTY in the same
// run), for work on the terminal path:
//
//	go test -tags '… lazaret_bench' -run '^TestBenchTerminal$' ./integration/ -args …
func TestBenchTerminal(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	// Warm up: prepares the busybox lower once.
	asUser(t, e, ws, filepath.Join(e.bin, "lazaret"), "run", "-p", "tiny", "--", "true")
	noLeftovers(t)
	term := benchTerminal(t, e, ws, *flagTermRuns)
	noLeftovers(t)
	for i := range term {
		term[i].MedianMS = median(term[i].RunsMS)
	}
	fmt.Printf("%-24s %10.1f   runs %v\n", term[0].Name, term[0].MedianMS, term[0].RunsMS)
	fmt.Printf("%-24s %10.1f   runs %v\n", term[1].Name, term[1].MedianMS, term[1].RunsMS)
	fmt.Printf("%-24s %10.3f\n%-24s %10.3f\n", term[2].Name, term[2].MedianMS, term[3].Name, term[3].MedianMS)
	fmt.Printf("%-24s %10.1f   runs %v\n", term[4].Name, term[4].MedianMS, term[4].RunsMS)
	fmt.Printf("%-24s %10.1f   runs %v\n", term[5].Name, term[5].MedianMS, term[5].RunsMS)
	fmt.Printf("PTY throughput, cat of 64 MiB: %.0f%% of host (target >= 50%%)\n", 100*term[0].MedianMS/term[1].MedianMS)
	fmt.Println(ptyReferenceLine(term[0].MedianMS, term[1].MedianMS, term[4].MedianMS, term[5].MedianMS))
	fmt.Printf("keystroke echo latency median: +%.2f ms over host (target <= 5 ms)\n", term[3].MedianMS-term[2].MedianMS)
}

// ptyReferenceLine reports the PTY reference and gVisor on one PTY against
// the host and Lazaret (median times of the 64 MiB cat).
func ptyReferenceLine(host, lazaret, ref, onePTY float64) string {
	return fmt.Sprintf("PTY reference (bare runsc exec + minimal two-process relay through a second PTY, no Lazaret code): %.0f%% of host, Lazaret's throughput is %.0f%% of it; bare runsc exec on one PTY, no relay: %.0f%% of host",
		100*host/ref, 100*ref/lazaret, 100*host/onePTY)
}
