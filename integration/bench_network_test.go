//go:build lazaret_bench

package integration

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

var flagNetMiB = flag.Int("bench-net-mib", 256, "MiB per TCP throughput run")

// TestBenchNetwork measures, in one run against the same test host (a
// network namespace this test creates): TCP throughput and connect latency
// from the sandbox (through gVisor and the connectivity helper) vs from the
// host.
func TestBenchNetwork(t *testing.T) {
	need(t)
	n := newTestNet(t)
	mib := *flagNetMiB
	const connects = 50
	target := n.permitted
	// Host side.
	hostThroughput := func() float64 {
		c, err := net.Dial("tcp4", target+":7777")
		if err != nil {
			t.Fatal(err)
		}
		// Read the greeting first: closing with unread data would reset the
		// connection and drop the tail of the upload.
		bufio.NewReader(c).ReadString('\n')
		buf := make([]byte, 1<<20)
		for i := 0; i < mib; i++ {
			c.Write(buf)
		}
		c.Close()
		return n.lastDoneMiBps(t, target)
	}
	var hostMiBps []float64
	for i := 0; i < 3; i++ {
		hostMiBps = append(hostMiBps, hostThroughput())
	}
	var hostConnect []float64
	for i := 0; i < connects; i++ {
		d, err := tcpRTT(context.Background(), target+":7777")
		if err != nil {
			t.Fatal(err)
		}
		hostConnect = append(hostConnect, ms(d))
	}
	// Sandbox side: one session does the throughput runs and the connect loop.
	ws := workspace(t)
	script := fmt.Sprintf(`for i in 1 2 3; do exec 3<>/dev/tcp/%s/7777; read -r line <&3; head -c %dM /dev/zero >&3; exec 3>&-; sleep 0.3; done
for i in $(seq %d); do s=${EPOCHREALTIME/./}; exec 3<>/dev/tcp/%s/7777; read -r line <&3; exec 3>&-; e=${EPOCHREALTIME/./}; echo connect $(( e - s )); done`, target, mib, connects, target)
	r := lz(t, ws, nil, "run", "--", "bash", "-c", script)
	if r.code != 0 {
		t.Fatalf("sandbox run: %+v", r)
	}
	var sbConnect []float64
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "connect" {
			us, _ := strconv.Atoi(f[1])
			sbConnect = append(sbConnect, float64(us)/1000)
		}
	}
	time.Sleep(500 * time.Millisecond)
	sbMiBps := n.doneMiBps(target, mib)
	if len(sbMiBps) < 3 || len(sbConnect) != connects {
		t.Fatalf("sandbox measurements: %v %v\n%s\narrivals: %v", sbMiBps, sbConnect, r.stderr, n.arrivedAt(target))
	}
	sbMiBps = sbMiBps[len(sbMiBps)-3:]
	// Connect latency in the sandbox is measured around bash's /dev/tcp
	// (one connect, one line read, close) — the host figure does the same.
	fmt.Printf("\n%-34s %10s %10s %8s\n", "network (same test host)", "host", "sandbox", "ratio")
	fmt.Printf("%-34s %10.0f %10.0f %7.0f%%\n", "TCP throughput MiB/s (median of 3)", median(hostMiBps), median(sbMiBps), 100*median(sbMiBps)/median(hostMiBps))
	fmt.Printf("%-34s %10.3f %10.3f %7.1fx\n", "TCP connect+line ms (median of 50)", median(hostConnect), median(sbConnect), median(sbConnect)/median(hostConnect))
	recordBench(t, "network", "", map[string]any{
		"host_tcp_mibps": hostMiBps, "sandbox_tcp_mibps": sbMiBps,
		"host_connect_line_ms": hostConnect, "sandbox_connect_line_ms": sbConnect,
		"ratios": map[string]float64{"tcp_throughput_vs_host": median(sbMiBps) / median(hostMiBps), "connect_line_vs_host": median(sbConnect) / median(hostConnect)}})
	noLeftovers(t)
}

// doneMiBps lists the throughput of every completed upload of at least
// mib MiB to address a, in arrival order.
func (n *testNet) doneMiBps(a string, mib int) []float64 {
	var out []float64
	for _, l := range n.arrivedAt(a) {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "tcp-done" {
			b, _ := strconv.ParseFloat(f[2], 64)
			us, _ := strconv.ParseFloat(f[3], 64)
			if b >= float64(mib)*(1<<20) && us > 0 {
				out = append(out, b/(1<<20)/(us/1e6))
			}
		}
	}
	return out
}

// lastDoneMiBps waits for the newest completed upload to a and returns its
// throughput.
func (n *testNet) lastDoneMiBps(t *testing.T, a string) float64 {
	t.Helper()
	for i := 0; i < 100; i++ {
		if d := n.doneMiBps(a, 1); len(d) > 0 {
			n.mu.Lock()
			n.arrivals = nil
			n.mu.Unlock()
			return d[len(d)-1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("upload not reported by the test host")
	return 0
}
