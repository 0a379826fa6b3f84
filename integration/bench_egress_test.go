//go:build lazaret_bench

package integration

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagEgressMiB      = flag.Int("bench-egress-mib", 256, "MiB per upload through the egress proxy and direct")
	flagEgressConnects = flag.Int("bench-egress-connects", 200, "refused connect() calls timed per mode")
	flagEgressCurls    = flag.Int("bench-egress-curls", 30, "refused curl requests timed per mode")
)

// p95 is the 95th percentile (nearest rank).
func p95(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[int(math.Ceil(0.95*float64(len(s))))-1]
}

// TestBenchEgress measures, in one run against the same test host (a
// network namespace this test creates), how fast a denied destination is
// refused inside the sandbox — connect() to a denied address in deny mode
// (the fail-fast address space), connect() to any address in allowlist
// mode (no route but the proxy's), a CONNECT for a name outside the
// allowlist (the proxy's 403), and curl's own time for each — and the
// throughput of an upload through the proxy's CONNECT vs direct (deny
// mode) to the same test host port.
func TestBenchEgress(t *testing.T) {
	e := need(t)
	n := newEgressNet(t)
	mib, connects, curls := *flagEgressMiB, *flagEgressConnects, *flagEgressCurls
	ws := workspace(t)
	writeProbe(t, e, ws)
	sinkIP, denied := n.ip("api"), n.ip("private")
	cfg := userConfig(t, e, fmt.Sprintf(`[profiles.egdeny]
image = "debian"
network.dns = [%q]
`, n.ip("api"))+n.allowlistProfile("egallow", []string{n.name("api")}, ""))
	env := n.caEnv()
	checkConfig(t, ws, cfg, env)
	curlLoop := func(label, url string) string {
		return fmt.Sprintf(`for i in $(seq %d); do echo "%s $(curl -s -o /dev/null --max-time 5 -w '%%{http_code}/%%{http_connect} %%{time_total}' %s)"; done
`, curls, label, url)
	}
	uploads := func(cmd string) string {
		return fmt.Sprintf("for i in 1 2 3; do python3 egress_probe.py %s %d; sleep 0.3; done\n", cmd, mib)
	}
	var last result
	run := func(profile, script string) map[string][]string {
		t.Helper()
		r := lzFor(t, 10*time.Minute, ws, env, nil, "run", "--config", cfg, "-p", profile, "--", "bash", "-c", script)
		if r.code != 0 {
			t.Fatalf("%s: %+v", profile, r)
		}
		last = r
		out := map[string][]string{}
		for _, l := range strings.Split(r.stdout, "\n") {
			if k, v, ok := strings.Cut(l, " "); ok {
				out[k] = append(out[k], v)
			}
		}
		return out
	}
	// Per-attempt µs of "LABEL RESULT US" lines, each RESULT as wanted.
	times := func(lines []string, want string, n int) []float64 {
		t.Helper()
		var out []float64
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 2 || f[0] != want {
				t.Fatalf("refusal measurement %q, want %s", l, want)
			}
			us, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("refusal measurement %q, want %s", l, want)
			}
			out = append(out, float64(us)/1000)
		}
		if len(out) != n {
			t.Fatalf("%d refusal measurements, want %d", len(out), n)
		}
		return out
	}
	// curl's time_total of "LABEL CODE/CONNECT SECONDS" lines.
	curlTimes := func(lines []string, want string) []float64 {
		t.Helper()
		var out []float64
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 2 || f[0] != want {
				t.Fatalf("curl refusal %q, want %s", l, want)
			}
			s, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("curl refusal %q, want %s", l, want)
			}
			out = append(out, s*1000)
		}
		if len(out) != curls {
			t.Fatalf("%d curl refusals, want %d", len(out), curls)
		}
		return out
	}
	uploaded := func(what string) []float64 {
		t.Helper()
		time.Sleep(500 * time.Millisecond)
		d := n.doneMiBps(sinkIP, mib)
		if len(d) != 3 {
			t.Fatalf("%s: %d completed uploads of %d MiB at the test host, want 3; arrivals:\n%s\nsandbox stderr:\n%s", what, len(d), mib, strings.Join(n.arrivedAt(sinkIP), "\n"), last.stderr)
		}
		n.mu.Lock()
		n.arrivals = nil
		n.mu.Unlock()
		return d
	}

	// Deny mode (the default): a denied address, then direct uploads.
	dm := run("egdeny", fmt.Sprintf("python3 egress_probe.py latency deny %s 7777 %d\n", denied, connects)+
		curlLoop("curl-deny", fmt.Sprintf("http://%s:7777/", denied))+
		uploads(fmt.Sprintf("upload-direct up %s 7777", sinkIP)))
	denyConnect := times(dm["deny"], "ECONNREFUSED", connects)
	denyCurl := curlTimes(dm["curl-deny"], "000/000")
	direct := uploaded("direct")
	noLeftovers(t)

	// Allowlist mode: a direct connect, a refused name through the proxy,
	// then uploads through CONNECT to the same port.
	am := run("egallow", fmt.Sprintf("python3 egress_probe.py latency direct %s 7777 %d\n", sinkIP, connects)+
		fmt.Sprintf("python3 egress_probe.py connect-latency proxy %s 443 %d\n", n.name("outside"), connects)+
		curlLoop("curl-name", "https://"+n.name("outside")+"/")+
		curlLoop("curl-ip", fmt.Sprintf("http://%s:7777/", denied))+
		uploads(fmt.Sprintf("upload-connect up %s 7777", n.name("api"))))
	allowDirect := times(am["direct"], "ENETUNREACH", connects)
	allowProxy := times(am["proxy"], "code=403", connects)
	allowCurlName := curlTimes(am["curl-name"], "000/403")
	allowCurlIP := curlTimes(am["curl-ip"], "403/000")
	through := uploaded("through CONNECT")
	noLeftovers(t)

	meas := []measurement{
		{Name: "egress_refused_connect_deny_mode", RunsMS: denyConnect},
		{Name: "egress_refused_connect_allowlist_direct", RunsMS: allowDirect},
		{Name: "egress_refused_connect_allowlist_proxy_403", RunsMS: allowProxy},
		{Name: "egress_curl_refused_deny_mode", RunsMS: denyCurl},
		{Name: "egress_curl_refused_allowlist_name", RunsMS: allowCurlName},
		{Name: "egress_curl_refused_allowlist_ip", RunsMS: allowCurlIP},
	}
	rep := benchReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"), Ratios: map[string]float64{}}
	fmt.Printf("\n%-44s %10s %10s   (ms; target: curl refused in < 100 ms in both modes)\n", "refusal inside the sandbox", "median", "p95")
	for _, m := range meas {
		m.MedianMS = median(m.RunsMS)
		rep.Measurements = append(rep.Measurements, m)
		rep.Ratios[m.Name+"_p95_ms"] = p95(m.RunsMS)
		fmt.Printf("%-44s %10.3f %10.3f\n", m.Name, m.MedianMS, p95(m.RunsMS))
	}
	rep.Ratios["egress_upload_direct_mibps"] = median(direct)
	rep.Ratios["egress_upload_connect_mibps"] = median(through)
	rep.Ratios["egress_connect_throughput_vs_direct"] = median(through) / median(direct)
	fmt.Printf("upload of %d MiB to the same test host port (median of 3): direct (deny mode) %.0f MiB/s, through the proxy's CONNECT %.0f MiB/s (%.0f%% of direct)\n",
		mib, median(direct), median(through), 100*median(through)/median(direct))
	if *flagBenchOut != "" {
		os.MkdirAll(*flagBenchOut, 0o755)
		js, _ := json.MarshalIndent(rep, "", "  ")
		f := filepath.Join(*flagBenchOut, "egress-latest.json")
		os.WriteFile(f, js, 0o644)
		fmt.Printf("written %s\n", f)
	}
	recordBench(t, "egress", "", rep)
}
