package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The allowlist tests' test host: named services in a network namespace
// the test creates, reached only by names its own resolver answers. Every
// TCP connection and every request is reported on stdout, so a test can
// assert what reached the test host and what did not.
//
// Addresses (X a random third octet, 210–253, apart from newTestNet's):
//
//	198.18.X.2  api.S (and its DNS server)   198.18.X.5  git.S
//	198.18.X.3  x.cdn.S, y.z.cdn.S           198.18.X.6  npm.S
//	198.18.X.4  cdn.S (the wildcard's apex)  198.18.X.7  outside.S
//	198.18.X.8  dom.S                        10.77.X.2   private.S (a default deny)
//	10.78.X.2   inside.S (the profile allows 10.78.X.0/24)
//
// loop.S answers 127.0.0.1 and gone.S is NXDOMAIN. Every address serves
// HTTP on 80, HTTPS on 443 (a certificate of a CA the test makes), an
// SSH-like banner on 22 and a throughput sink on 7777; on git.S the HTTPS
// service is Git's smart HTTP (git http-backend), on npm.S a registry with
// one package.

const egressServerEnv = "LAZARET_IT_EGRESS"

// sshBanner is what the test host's port 22 says first.
const sshBanner = "SSH-2.0-lazaret-test"

// npmProbePackage is the one package of the test registry.
const npmProbePackage = "lazaret-egress-probe"

// egressPlan configures the test host's server (JSON in egressServerEnv).
type egressPlan struct {
	Addrs      []string          `json:"addrs"`
	DNS        string            `json:"dns"`     // address of the DNS server (port 53)
	Answers    map[string]string `json:"answers"` // name -> IPv4
	Cert       string            `json:"cert"`    // PEM paths
	Key        string            `json:"key"`
	GitHost    string            `json:"git_host"`
	GitBackend string            `json:"git_backend"` // git-http-backend
	GitRoot    string            `json:"git_root"`    // GIT_PROJECT_ROOT
	NpmHost    string            `json:"npm_host"`
	NpmDir     string            `json:"npm_dir"` // packument.json and the tarball
}

// runEgressServer is the test host's server (TestMain runs it inside the
// test network namespace when egressServerEnv is set).
func runEgressServer(cfg string) {
	var plan egressPlan
	if err := json.Unmarshal([]byte(cfg), &plan); err != nil {
		fmt.Fprintln(os.Stderr, "egress test host plan:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	die := func(err error) {
		fmt.Fprintln(os.Stderr, "egress test host:", err)
		os.Exit(1)
	}
	cert, err := tls.LoadX509KeyPair(plan.Cert, plan.Key)
	if err != nil {
		die(err)
	}
	git := &cgi.Handler{Path: plan.GitBackend, Env: []string{"GIT_PROJECT_ROOT=" + plan.GitRoot, "GIT_HTTP_EXPORT_ALL=1"}}
	errLog := log.New(os.Stderr, "egress test host: ", 0)
	listen := func(a string, port int) net.Listener {
		l, err := net.Listen("tcp4", fmt.Sprintf("%s:%d", a, port))
		if err != nil {
			die(err)
		}
		return &loggedListener{Listener: l, log: func(from net.Addr) { say("conn %s %d from %s", a, port, from) }}
	}
	for _, a := range plan.Addrs {
		handler := func(scheme string) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				host := r.Host
				if h, _, err := net.SplitHostPort(host); err == nil {
					host = h
				}
				say("%s %s %s %s %s", scheme, a, host, r.Method, r.URL.Path)
				switch {
				case scheme == "https" && host == plan.GitHost:
					git.ServeHTTP(w, r)
				case scheme == "https" && host == plan.NpmHost:
					serveNpm(w, r, plan.NpmDir)
				default:
					fmt.Fprintf(w, "hello from %s via %s %s\n", host, scheme, r.URL.Path)
				}
			})
		}
		go (&http.Server{Handler: handler("http"), ErrorLog: errLog}).Serve(listen(a, 80))
		tl := tls.NewListener(listen(a, 443), &tls.Config{Certificates: []tls.Certificate{cert}})
		go (&http.Server{Handler: handler("https"), ErrorLog: errLog}).Serve(tl)
		go serveBanner(listen(a, 22), func(format string, args ...any) { say(format, append([]any{a}, args...)...) })
		go serveSink(listen(a, 7777), a, say)
	}
	d, err := net.ListenPacket("udp4", plan.DNS+":53")
	if err != nil {
		die(err)
	}
	go serveDNS(d, plan.Answers, func(q string) { say("dns %s query %s", plan.DNS, strings.ToLower(q)) })
	say("ready")
	select {}
}

// loggedListener reports every accepted connection.
type loggedListener struct {
	net.Listener
	log func(net.Addr)
}

func (l *loggedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.log(c.RemoteAddr())
	}
	return c, err
}

// serveBanner is an SSH-like service: it writes sshBanner, reads the
// client's first line (or waits two seconds) and closes.
func serveBanner(l net.Listener, say func(string, ...any)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "%s\r\n", sshBanner)
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			say("ssh %s client %q", strings.TrimSpace(line))
		}()
	}
}

// serveSink greets, then counts what arrives until EOF and reports
// "tcp-done ADDR BYTES MICROSECONDS" (the format doneMiBps reads).
func serveSink(l net.Listener, a string, say func(string, ...any)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "hello from %s\n", a)
			start := time.Now()
			n, _ := io.Copy(io.Discard, c)
			if n > 0 {
				say("tcp-done %s %d %d", a, n, time.Since(start).Microseconds())
			}
		}()
	}
}

// serveNpm is the test registry: the packument of npmProbePackage and its
// tarball, nothing else.
func serveNpm(w http.ResponseWriter, r *http.Request, dir string) {
	switch r.URL.Path {
	case "/" + npmProbePackage:
		w.Header().Set("Content-Type", "application/json")
		http.ServeFile(w, r, filepath.Join(dir, "packument.json"))
	case "/" + npmProbePackage + "/-/" + npmProbePackage + "-1.0.0.tgz":
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeFile(w, r, filepath.Join(dir, "package.tgz"))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"not found"}`)
	}
}

// egressNet is one test host for the allowlist tests.
type egressNet struct {
	*testNet // the arrivals (arrivedAt; doneMiBps in the benchmarks)
	ns       string
	suffix   string
	names    map[string]string // short name (api, cdn-sub, …) -> full name
	addrs    map[string]string // short name -> address
	ca       string            // the CA's PEM, readable by the test user
	// Markers the sandbox must read back.
	gitMarker, npmMarker string
}

// name returns the full name of a short one ("api" -> "api.eg-….lazaret-test").
func (n *egressNet) name(short string) string {
	v, ok := n.names[short]
	if !ok {
		panic("no test host name " + short)
	}
	return v
}

func (n *egressNet) ip(short string) string {
	v, ok := n.addrs[short]
	if !ok {
		panic("no test host address " + short)
	}
	return v
}

// caEnv is the environment of a `lazaret run` whose host_ca profile
// trusts the test CA (host_ca reads the run's SSL_CERT_FILE).
func (n *egressNet) caEnv() []string { return []string{"SSL_CERT_FILE=" + n.ca} }

// lines lists the arrivals containing every one of subs.
func (n *egressNet) lines(subs ...string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
next:
	for _, l := range n.arrivals {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	e := need(t)
	n := &egressNet{testNet: &testNet{x: testHostOctet()}, suffix: "eg-" + randHex(3) + ".lazaret-test", names: map[string]string{}, addrs: map[string]string{}}
	for _, h := range []struct{ short, name, addr string }{
		{"api", "api", "198.18.%d.2"},
		{"cdn-sub", "x.cdn", "198.18.%d.3"},
		{"cdn-deep", "y.z.cdn", "198.18.%d.3"},
		{"cdn-apex", "cdn", "198.18.%d.4"},
		{"git", "git", "198.18.%d.5"},
		{"npm", "npm", "198.18.%d.6"},
		{"outside", "outside", "198.18.%d.7"},
		{"dom", "dom", "198.18.%d.8"},
		{"private", "private", "10.77.%d.2"},
		{"inside", "inside", "10.78.%d.2"},
		{"loop", "loop", "127.0.0.1"},
		{"gone", "gone", ""},
	} {
		n.names[h.short] = h.name + "." + n.suffix
		switch {
		case strings.Contains(h.addr, "%d"):
			n.addrs[h.short] = n.addr(h.addr)
		case h.addr != "":
			n.addrs[h.short] = h.addr
		}
	}
	answers := map[string]string{}
	var hosts []string
	seen := map[string]bool{}
	for short, a := range n.addrs {
		answers[n.names[short]] = a
		if a != "127.0.0.1" && !seen[a] {
			seen[a] = true
			hosts = append(hosts, a)
		}
	}
	// Certificates: the CA file the test user reads, the key pair the
	// server (root, in the namespace) reads.
	dir := e.userDir("egress-" + randHex(3))
	var dnsNames []string
	for _, v := range n.names {
		dnsNames = append(dnsNames, v)
	}
	n.ca = filepath.Join(dir, "ca.pem")
	certFile, keyFile := filepath.Join(dir, "host.pem"), filepath.Join(dir, "host.key")
	writeTestPKI(t, n.ca, certFile, keyFile, dnsNames, hosts)
	// A bare Git repository with one commit.
	n.gitMarker = "git-clone-" + randHex(4)
	gitRoot := t.TempDir()
	makeBareRepo(t, filepath.Join(gitRoot, "repo.git"), n.gitMarker)
	gitExec, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v (the test host's Git smart HTTP needs git: apt-get install git)", err)
	}
	// The registry's package.
	n.npmMarker = "npm-install-" + randHex(4)
	npmDir := t.TempDir()
	writeNpmPackage(t, npmDir, "https://"+n.name("npm")+"/", n.npmMarker)
	plan := egressPlan{
		Addrs: hosts, DNS: n.ip("api"), Answers: answers, Cert: certFile, Key: keyFile,
		GitHost: n.name("git"), GitBackend: filepath.Join(strings.TrimSpace(string(gitExec)), "git-http-backend"), GitRoot: gitRoot,
		NpmHost: n.name("npm"), NpmDir: npmDir,
	}
	cfg, _ := json.Marshal(plan)
	n.ns = serveOnTestHost(t, hosts, egressServerEnv, string(cfg), func(line string) {
		n.mu.Lock()
		n.arrivals = append(n.arrivals, line)
		n.mu.Unlock()
	})
	return n
}

// writeTestPKI makes a CA and a server certificate for names and ips
// signed by it (ECDSA P-256), as PEM files; the CA file is world-readable.
func writeTestPKI(t *testing.T, caFile, certFile, keyFile string, names, ips []string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Lazaret integration test CA " + randHex(3)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{{caFile, "CERTIFICATE", caDER, 0o644}, {certFile, "CERTIFICATE", der, 0o644}, {keyFile, "EC PRIVATE KEY", keyDER, 0o600}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			t.Fatal(err)
		}
	}
}

// makeBareRepo creates a bare repository at bare whose branch main has one
// commit with README containing marker.
func makeBareRepo(t *testing.T, bare, marker string) {
	t.Helper()
	work := t.TempDir()
	gitEnv := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "--initial-branch=main", bare},
		{"-C", work, "init", "-q", "--initial-branch=main"},
	} {
		c := exec.Command("git", args...)
		c.Env = gitEnv
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "README"), []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "README"}, {"commit", "-q", "-m", "test"}, {"push", "-q", bare, "main"}} {
		c := exec.Command("git", append([]string{"-C", work}, args...)...)
		c.Env = gitEnv
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// writeNpmPackage writes the registry's files for npmProbePackage 1.0.0
// (index.js exports marker) into dir: package.tgz and packument.json,
// whose tarball URL is under registry.
func writeNpmPackage(t *testing.T, dir, registry, marker string) {
	t.Helper()
	pkgJSON, _ := json.Marshal(map[string]any{"name": npmProbePackage, "version": "1.0.0", "main": "index.js", "license": "MIT"})
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", string(pkgJSON)},
		{"package/index.js", fmt.Sprintf("module.exports = %q;\n", marker)},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(499162500, 0), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR})
		io.WriteString(tw, f.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	tgz := buf.Bytes()
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	packument, _ := json.MarshalIndent(map[string]any{
		"_id": npmProbePackage, "name": npmProbePackage,
		"dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{
			"_id": npmProbePackage + "@1.0.0", "name": npmProbePackage, "version": "1.0.0", "main": "index.js", "license": "MIT",
			"dist": map[string]string{
				"tarball":   registry + npmProbePackage + "/-/" + npmProbePackage + "-1.0.0.tgz",
				"shasum":    hex.EncodeToString(sha1sum[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
			},
		}},
		"time": map[string]string{"created": "1985-10-26T08:15:00.000Z", "modified": "1985-10-26T08:15:00.000Z", "1.0.0": "1985-10-26T08:15:00.000Z"},
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "package.tgz"), tgz, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "packument.json"), packument, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSpec36AllowlistTestHost proves the allowlist tests' test host on its
// own, from the host, without the product: its resolver answers the names
// (and NXDOMAIN), HTTPS with the test CA and plain HTTP answer on each
// name, port 22 gives the banner, `git clone` over its smart HTTP and
// `npm install` from its registry work, and every arrival is reported.
func TestSpec36AllowlistTestHost(t *testing.T) {
	parallel(t)
	need(t)
	n := newEgressNet(t)
	host := func(name string, args ...string) string {
		t.Helper()
		c := exec.Command(name, args...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	api, apiIP := n.name("api"), n.ip("api")
	// The resolver, through the namespace's own resolv.conf (ip netns exec
	// bind-mounts /etc/netns/NS/resolv.conf).
	etc := filepath.Join("/etc/netns", n.ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+apiIP+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, short := range []string{"api", "cdn-deep", "private", "loop", "inside"} {
		got := strings.Fields(host("ip", "netns", "exec", n.ns, "getent", "ahostsv4", n.name(short)))
		if len(got) == 0 || got[0] != n.ip(short) {
			t.Errorf("the test resolver answers %v for %s, want %s", got, n.name(short), n.ip(short))
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", n.ns, "getent", "ahostsv4", n.name("gone")).CombinedOutput(); err == nil {
		t.Errorf("%s resolved: %s", n.name("gone"), out)
	}
	// HTTPS with the test CA, HTTP, the banner, from the host.
	if got := host("curl", "-sS", "--max-time", "10", "--cacert", n.ca, "--resolve", api+":443:"+apiIP, "https://"+api+"/tls"); got != "hello from "+api+" via https /tls\n" {
		t.Errorf("HTTPS: %q", got)
	}
	deep, deepIP := n.name("cdn-deep"), n.ip("cdn-deep")
	if got := host("curl", "-sS", "--max-time", "10", "--resolve", deep+":80:"+deepIP, "http://"+deep+"/plain"); got != "hello from "+deep+" via http /plain\n" {
		t.Errorf("HTTP: %q", got)
	}
	if out, err := exec.Command("curl", "-sS", "--max-time", "10", "--resolve", api+":443:"+apiIP, "https://"+api+"/untrusted").CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate") {
		t.Errorf("HTTPS without the test CA: %v %s, want a certificate error", err, out)
	}
	c, err := net.DialTimeout("tcp4", n.ip("git")+":22", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	banner, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if banner != sshBanner+"\r\n" {
		t.Errorf("port 22 says %q", banner)
	}
	// git clone over the smart HTTP, from the host.
	clone := filepath.Join(t.TempDir(), "clone")
	gitc := exec.Command("git", "-c", "http.curloptResolve="+n.name("git")+":443:"+n.ip("git"), "clone", "-q", "https://"+n.name("git")+"/repo.git", clone)
	gitc.Env = append(os.Environ(), "GIT_SSL_CAINFO="+n.ca, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := gitc.CombinedOutput(); err != nil {
		t.Fatalf("git clone from the test host: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(clone, "README")); string(b) != n.gitMarker+"\n" {
		t.Errorf("cloned README: %q, want %q", b, n.gitMarker)
	}
	// npm install from the registry, in the namespace (names through the
	// test resolver), when this host has npm; else the packument and the
	// tarball with curl.
	if _, err := exec.LookPath("npm"); err == nil {
		proj := t.TempDir()
		os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name":"p","version":"1.0.0","private":true}`), 0o644)
		npm := exec.Command("ip", "netns", "exec", n.ns, "npm", "install", "--no-audit", "--no-fund", "--no-update-notifier", "--registry", "https://"+n.name("npm")+"/",
			"--cafile", n.ca, "--cache", filepath.Join(proj, ".cache"), "--userconfig", "/dev/null", npmProbePackage)
		npm.Dir = proj
		npm.Env = append(os.Environ(), "HTTPS_PROXY=", "HTTP_PROXY=", "https_proxy=", "http_proxy=", "NO_PROXY=")
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm install from the test registry: %v\n%s", err, out)
		}
		if b, _ := os.ReadFile(filepath.Join(proj, "node_modules", npmProbePackage, "index.js")); !strings.Contains(string(b), n.npmMarker) {
			t.Errorf("installed index.js: %q, want the marker %s", b, n.npmMarker)
		}
	} else {
		t.Logf("no npm on this host: the registry is checked with curl only")
		npm, npmIP := n.name("npm"), n.ip("npm")
		doc := host("curl", "-sS", "--max-time", "10", "--cacert", n.ca, "--resolve", npm+":443:"+npmIP, "https://"+npm+"/"+npmProbePackage)
		if !strings.Contains(doc, `"tarball": "https://`+npm+"/") {
			t.Errorf("packument: %s", doc)
		}
		host("curl", "-sSf", "--max-time", "10", "--cacert", n.ca, "--resolve", npm+":443:"+npmIP, "-o", "/dev/null", "https://"+npm+"/"+npmProbePackage+"/-/"+npmProbePackage+"-1.0.0.tgz")
	}
	time.Sleep(200 * time.Millisecond)
	for _, want := range [][]string{
		{"https " + apiIP + " " + api + " GET /tls"},
		{"http " + deepIP + " " + deep + " GET /plain"},
		{"conn " + apiIP + " 443 "},
		{"ssh " + n.ip("git")},
		{"https " + n.ip("git") + " " + n.name("git") + " ", "/repo.git/info/refs"},
		{"https " + n.ip("npm") + " " + n.name("npm") + " GET /" + npmProbePackage},
		{"dns " + apiIP + " query " + n.name("gone")},
	} {
		if len(n.lines(want...)) == 0 {
			t.Errorf("no arrival %q reported; arrivals:\n%s", want, strings.Join(n.lines(), "\n"))
		}
	}
	if l := n.arrivedAt(n.ip("outside")); len(l) != 0 {
		t.Errorf("arrivals at an address nobody contacted: %v", l)
	}
}

// egressProbe is a small Python program the sandbox runs (python3 is in
// the debian image): raw requests through the proxies named by the
// environment, direct connects, and the benchmarks' loops. Each command
// prints lines starting with its label.
const egressProbe = `import base64, errno, ipaddress, os, socket, sys, time, urllib.parse

def proxy(var):
    u = urllib.parse.urlsplit(os.environ[var])
    return u.hostname, u.port, urllib.parse.unquote(u.username or "")

def recvn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += c
    return b

def head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        c = s.recv(4096)
        if not c:
            break
        data += c
    h, _, rest = data.partition(b"\r\n\r\n")
    lines = h.decode("latin-1").split("\r\n")
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    code = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "none"
    return code, hdrs, rest

def connect(host, port):
    ph, pp, user = proxy("HTTPS_PROXY")
    s = socket.create_connection((ph, pp), timeout=15)
    auth = base64.b64encode((user + ":").encode()).decode()
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\nProxy-Authorization: Basic %s\r\n\r\n" % (host, port, host, port, auth)).encode())
    code, hdrs, rest = head(s)
    return s, code, hdrs, rest

def cmd_connect(label, host, port):
    s, code, hdrs, body = connect(host, int(port))
    if code != "200":
        n = int(hdrs.get("content-length") or -1)
        while n < 0 or len(body) < n:
            c = s.recv(4096)
            if not c:
                break
            body += c
    else:
        body = b""
    print(label, "code=" + code, "denied=" + hdrs.get("x-lazaret-denied", ""), "body=" + body.decode("utf-8", "replace").strip().replace("\n", " "))

def socks(host, port):
    ph, pp, user = proxy("ALL_PROXY")
    s = socket.create_connection((ph, pp), timeout=15)
    s.sendall(b"\x05\x02\x00\x02")
    m = recvn(s, 2)
    if m[1] == 2:
        u = user.encode()
        s.sendall(b"\x01" + bytes([len(u)]) + u + b"\x00")
        if recvn(s, 2)[1] != 0:
            return s, "auth-failed"
    elif m[1] != 0:
        return s, "method-%d" % m[1]
    try:
        addr = b"\x01" + ipaddress.IPv4Address(host).packed
    except ValueError:
        addr = b"\x03" + bytes([len(host)]) + host.encode()
    s.sendall(b"\x05\x01\x00" + addr + int(port).to_bytes(2, "big"))
    r = recvn(s, 4)
    if r[3] == 1:
        recvn(s, 6)
    elif r[3] == 4:
        recvn(s, 18)
    elif r[3] == 3:
        recvn(s, recvn(s, 1)[0] + 2)
    return s, "rep=%d" % r[1]

def cmd_socks(label, host, port):
    try:
        s, rep = socks(host, port)
    except (OSError, EOFError) as e:
        print(label, "error", e)
        return
    line = b""
    if rep == "rep=0":
        line = s.makefile("rb").readline()
    print(label, rep, line.decode("latin-1").strip())

def cmd_direct(label, addr, port):
    t0 = time.monotonic()
    try:
        socket.create_connection((addr, int(port)), timeout=5)
        r = "connected"
    except OSError as e:
        r = errno.errorcode.get(e.errno, "timeout") if e.errno else "timeout"
    print(label, r, int((time.monotonic() - t0) * 1e6))

def cmd_latency(label, addr, port, n):
    for i in range(int(n)):
        s = socket.socket()
        s.settimeout(5)
        t0 = time.perf_counter_ns()
        try:
            s.connect((addr, int(port)))
            r = "connected"
        except OSError as e:
            r = errno.errorcode.get(e.errno, "timeout") if e.errno else "timeout"
        us = (time.perf_counter_ns() - t0) // 1000
        s.close()
        print(label, r, us)

def cmd_connect_latency(label, host, port, n):
    for i in range(int(n)):
        t0 = time.perf_counter_ns()
        s, code, hdrs, rest = connect(host, int(port))
        us = (time.perf_counter_ns() - t0) // 1000
        s.close()
        print(label, "code=" + code, us)

def upload(s, mib, pending=b""):
    # The greeting line (part of it may have come with the CONNECT reply).
    while b"\n" not in pending:
        c = s.recv(4096)
        if not c:
            raise EOFError("closed before the greeting")
        pending += c
    buf = b"\0" * (1 << 20)
    for i in range(int(mib)):
        s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()

def cmd_upload_connect(label, host, port, mib):
    s, code, hdrs, rest = connect(host, int(port))
    if code != "200":
        print(label, "code=" + code)
        return
    upload(s, mib, rest)
    print(label, "done")

def cmd_upload_direct(label, addr, port, mib):
    upload(socket.create_connection((addr, int(port)), timeout=15), mib)
    print(label, "done")

cmds = {"connect": cmd_connect, "socks": cmd_socks, "direct": cmd_direct, "latency": cmd_latency,
        "connect-latency": cmd_connect_latency, "upload-connect": cmd_upload_connect, "upload-direct": cmd_upload_direct}
cmds[sys.argv[1]](*sys.argv[2:])
sys.stdout.flush()
`

// writeProbe puts egressProbe into the workspace (/workspace/egress_probe.py).
func writeProbe(t *testing.T, e *env, ws string) {
	t.Helper()
	p := filepath.Join(ws, "egress_probe.py")
	if err := os.WriteFile(p, []byte(egressProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, e.uid, e.gid)
}

// curlProbe is a shell function for the sandbox: `c LABEL CURL-ARGS…`
// prints one line "LABEL rc=… code=… connect=… time=… denied=… body=… err=…"
// (connect is the proxy's answer to a CONNECT, denied its X-Lazaret-Denied
// header).
const curlProbe = `c() { l=$1; shift; out=$(curl -sS --max-time 15 -D /tmp/h -o /tmp/b -w '%{http_code} %{http_connect} %{time_total}' "$@" 2>/tmp/e); rc=$?; set -- $out; echo "$l rc=$rc code=$1 connect=$2 time=$3 denied=$(grep -i '^x-lazaret-denied:' /tmp/h 2>/dev/null | tr -d '\r' | cut -d' ' -f2 | head -n1) body=$(tr '\n' ' ' 2>/dev/null </tmp/b) err=$(tr '\n' ' ' 2>/dev/null </tmp/e)"; rm -f /tmp/h /tmp/b /tmp/e; }
`

// probeLines maps each label of a probe script's output to the rest of
// its (first) line.
func probeLines(out string) map[string]string {
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, " ")
		if _, dup := got[k]; !dup && k != "" {
			got[k] = v
		}
	}
	return got
}

// field returns the value of key=… in a probe line (up to the next " key=").
func field(line, key string) string {
	i := strings.Index(" "+line, " "+key+"=")
	if i < 0 {
		return ""
	}
	rest := line[i+len(key)+1:]
	if j := regexp.MustCompile(` [a-z]+=`).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return strings.TrimSpace(rest)
}

// deniedText is the proxy's refusal of a name outside the allowlist.
func deniedText(host string, port int, profile string) string {
	return fmt.Sprintf(`lazaret: egress to %s:%d denied by profile %s (network.mode = "allowlist"); to allow it add "%s" to network.allow_hosts in the profile`, host, port, profile, host)
}

// denial is one entry of `lazaret network log --json` (the design's
// denial log line).
type denial struct {
	V        int    `json:"v"`
	Time     string `json:"time"`
	Session  string `json:"session"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Addr     string `json:"addr"`
	Via      string `json:"via"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
}

// networkLog runs `lazaret network log --json` for the profile and parses
// it: one JSON object a line (a JSON array is accepted too).
func networkLog(t *testing.T, ws string, env []string, args ...string) []denial {
	t.Helper()
	r := lzEnv(t, ws, env, nil, append([]string{"network", "log", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("lazaret network log --json: %+v", r)
	}
	var out []denial
	if s := strings.TrimSpace(r.stdout); strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			t.Fatalf("network log --json: %v\n%s", err, r.stdout)
		}
		return out
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if l == "" {
			continue
		}
		var d denial
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("network log --json line %q: %v", l, err)
		}
		out = append(out, d)
	}
	return out
}

// findDenial returns the entries for host:port via via (any via when
// empty), oldest first.
func findDenial(log []denial, host string, port int, via string) []denial {
	var out []denial
	for _, d := range log {
		if d.Host == host && d.Port == port && (via == "" || d.Via == via) {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := time.Parse(time.RFC3339Nano, out[i].Time)
		b, _ := time.Parse(time.RFC3339Nano, out[j].Time)
		return a.Before(b)
	})
	return out
}

// checkConfig fails the test at once when the configuration is refused.
func checkConfig(t *testing.T, ws, cfg string, env []string) {
	t.Helper()
	if r := lzEnv(t, ws, env, nil, "config", "check", "--config", cfg); r.code != 0 {
		t.Fatalf("config check refused the test's configuration: %s%s", r.stdout, r.stderr)
	}
}

// allowlistProfile is a debian profile in allowlist mode trusting the test
// CA (host_ca with the run's SSL_CERT_FILE), resolving through the test
// host, allowing hosts; extra is appended to the table.
func (n *egressNet) allowlistProfile(name string, hosts []string, extra string) string {
	q := make([]string, len(hosts))
	for i, h := range hosts {
		q[i] = fmt.Sprintf("%q", h)
	}
	return fmt.Sprintf(`[profiles.%s]
image = "debian"
host_ca = true
network.mode = "allowlist"
network.allow_hosts = [%s]
network.dns = ["%s"]
%s`, name, strings.Join(q, ", "), n.ip("api"), extra)
}

// allowlistRules are the host rules of TestSpec36AllowlistEgress's
// profile: an exact name (any port), a wildcard, a name on two ports,
// names resolving to a denied, a loopback, an allowed-prefix address, and
// one that does not resolve.
func (n *egressNet) allowlistRules() []string {
	N := n.name
	return []string{N("api"), "*.cdn." + n.suffix, N("git") + ":22", N("git") + ":443", N("private"), N("loop"), N("inside"), N("gone")}
}

// allowedPrefix is the network.allow of that profile (inside.S's /24).
func (n *egressNet) allowedPrefix() string { return n.addr("10.78.%d.0") + "/24" }

// proxiedProbes is the part of TestSpec36AllowlistEgress's sandbox script
// that goes through the proxy (curlProbe and egress_probe.py lines).
func (n *egressNet) proxiedProbes() string {
	N := n.name
	outsideIP := n.ip("outside")
	return strings.Join([]string{
		"c https-api https://" + N("api") + "/h1",
		"c http-api http://" + N("api") + "/h2",
		"c wild-sub https://" + N("cdn-sub") + "/h3",
		"c wild-deep http://" + N("cdn-deep") + "/h4",
		"c wild-apex http://" + N("cdn-apex") + "/h5",
		"c wild-apex-tls https://" + N("cdn-apex") + "/h6",
		"c port-other http://" + N("git") + "/h7",
		"c outside-http http://" + N("outside") + "/h8",
		"c outside-https https://" + N("outside") + "/h9",
		"c rawip-http http://" + outsideIP + "/h10",
		"c rawip-https https://" + outsideIP + "/h11",
		"c rawip-allowed http://" + n.ip("inside") + "/h12",
		"c inside-name http://" + N("inside") + "/h13",
		"c private-name http://" + N("private") + "/h14",
		"c loop-name http://" + N("loop") + "/h15",
		"c gone-name http://" + N("gone") + "/h16",
		"python3 egress_probe.py connect connect-outside " + N("outside") + " 443",
		"python3 egress_probe.py connect connect-private " + N("private") + " 443",
		"python3 egress_probe.py socks socks-git " + N("git") + " 22",
		"python3 egress_probe.py socks socks-api22 " + N("api") + " 22",
		"python3 egress_probe.py socks socks-git80 " + N("git") + " 80",
		"python3 egress_probe.py socks socks-outside " + N("outside") + " 22",
		"python3 egress_probe.py socks socks-rawip " + outsideIP + " 22",
		"python3 egress_probe.py socks socks-gone " + N("gone") + " 22",
		`echo "telnet $(curl -sS --max-time 5 telnet://` + N("git") + `:22 </dev/null 2>&1 | tr -d '\r' | head -n1)"`,
		// GIT_SSH_COMMAND's ProxyCommand: the in-sandbox connect role.
		`echo "ssh-connect $(timeout 10 lazaret-escalate __lazaret-connect ` + N("git") + ` 22 </dev/null 2>&1 | tr -d '\r' | head -n1)"`,
		`timeout 10 lazaret-escalate __lazaret-connect ` + N("outside") + ` 22 </dev/null 2>/tmp/ce; echo "ssh-connect-outside rc=$? $(head -c 300 /tmp/ce)"`,
		`if git clone -q https://` + N("git") + `/repo.git /tmp/clone-$$ 2>/tmp/ge; then echo "git-clone $(cat /tmp/clone-$$/README)"; else echo "git-clone failed $(tr '\n' ' ' </tmp/ge)"; fi; rm -rf /tmp/clone-$$ /tmp/ge`,
		"c outside-last http://" + N("outside") + "/last",
	}, "\n") + "\n"
}

// checkProxied checks what proxiedProbes printed (got), what reached the
// test host, and the denial log dl (each refusal attributed to session)
// for the profile named profile.
func (n *egressNet) checkProxied(t *testing.T, got map[string]string, dl []denial, profile, session string) {
	t.Helper()
	N := n.name
	outsideIP := n.ip("outside")
	// Allowed: the test host answered, over TLS with the test CA.
	ok := func(label, host, scheme, path string) {
		t.Helper()
		if l := got[label]; field(l, "rc") != "0" || field(l, "code") != "200" || field(l, "body") != "hello from "+host+" via "+scheme+" "+path {
			t.Errorf("%s: %q, want 200 and the test host's hello", label, l)
		}
	}
	ok("https-api", N("api"), "https", "/h1")
	ok("http-api", N("api"), "http", "/h2")
	ok("wild-sub", N("cdn-sub"), "https", "/h3")
	ok("wild-deep", N("cdn-deep"), "http", "/h4")
	ok("rawip-allowed", n.ip("inside"), "http", "/h12")
	ok("inside-name", N("inside"), "http", "/h13")

	// Refused over plain HTTP: 403, the header, the message.
	refused := func(label, host string, port int, exact bool, also ...string) {
		t.Helper()
		l := got[label]
		body := field(l, "body")
		if field(l, "code") != "403" || field(l, "denied") != "1" {
			t.Errorf("%s: %q, want 403 with X-Lazaret-Denied: 1", label, l)
		}
		if want := deniedText(host, port, profile); exact && body != want {
			t.Errorf("%s: body %q, want %q", label, body, want)
		}
		if prefix := fmt.Sprintf("lazaret: egress to %s:%d denied by profile %s", host, port, profile); !strings.HasPrefix(body, prefix) {
			t.Errorf("%s: body %q, want it to start %q", label, body, prefix)
		}
		for _, a := range also {
			if !strings.Contains(body, a) {
				t.Errorf("%s: body %q does not name %q", label, body, a)
			}
		}
	}
	refused("wild-apex", N("cdn-apex"), 80, true)
	refused("port-other", N("git"), 80, false, "network.allow_hosts")
	refused("outside-http", N("outside"), 80, true)
	refused("outside-last", N("outside"), 80, true)
	refused("rawip-http", outsideIP, 80, false)
	if b := strings.ReplaceAll(field(got["rawip-http"], "body"), "network.allow_hosts", ""); !strings.Contains(b, "network.allow") {
		t.Errorf("the refusal of a raw IP does not name network.allow: %q", field(got["rawip-http"], "body"))
	}
	refused("private-name", N("private"), 80, false, n.ip("private"))
	refused("loop-name", N("loop"), 80, false, "127.0.0.1")
	// Refused CONNECTs: curl sees the proxy's 403 and fails.
	for _, label := range []string{"wild-apex-tls", "outside-https", "rawip-https"} {
		if l := got[label]; field(l, "connect") != "403" || field(l, "rc") == "0" {
			t.Errorf("%s: %q, want the CONNECT answered 403", label, l)
		}
	}
	if l := got["connect-outside"]; field(l, "code") != "403" || field(l, "denied") != "1" || field(l, "body") != deniedText(N("outside"), 443, profile) {
		t.Errorf("CONNECT %s:443: %q, want 403 with %q", N("outside"), l, deniedText(N("outside"), 443, profile))
	}
	if l := got["connect-private"]; field(l, "code") != "403" || !strings.HasPrefix(field(l, "body"), "lazaret: egress to "+N("private")+":443 denied by profile "+profile) {
		t.Errorf("CONNECT %s:443 (a denied address): %q", N("private"), l)
	}
	if l := got["gone-name"]; field(l, "code") != "502" {
		t.Errorf("an allowed name that does not resolve: %q, want 502", l)
	}
	// SOCKS5: an allowed name (and port) gets the banner; others 0x02, an
	// unresolvable allowed name 0x04.
	for _, label := range []string{"socks-git", "socks-api22"} {
		if l := got[label]; l != "rep=0 "+sshBanner {
			t.Errorf("%s: %q, want rep=0 and the banner", label, l)
		}
	}
	for label, want := range map[string]string{"socks-git80": "rep=2", "socks-outside": "rep=2", "socks-rawip": "rep=2", "socks-gone": "rep=4"} {
		if l := got[label]; strings.TrimSpace(l) != want {
			t.Errorf("%s: %q, want %s", label, l, want)
		}
	}
	if l := got["telnet"]; l != sshBanner {
		t.Errorf("curl telnet://%s:22 through ALL_PROXY: %q, want the banner", N("git"), l)
	}
	if l := got["ssh-connect"]; l != sshBanner {
		t.Errorf("the ssh ProxyCommand role to %s:22: %q, want the banner", N("git"), l)
	}
	if l := got["ssh-connect-outside"]; !strings.HasPrefix(l, "rc=1 ") || !strings.Contains(l, "not allowed") {
		t.Errorf("the ssh ProxyCommand role to %s:22: %q, want exit 1 and the proxy's refusal", N("outside"), l)
	}
	if l := got["git-clone"]; l != n.gitMarker {
		t.Errorf("git clone over HTTPS through the proxy: %q, want the README %q", l, n.gitMarker)
	}

	// The test host saw the allowed requests and nothing of the refused.
	time.Sleep(300 * time.Millisecond)
	for _, want := range [][]string{
		{"https " + n.ip("api") + " " + N("api") + " GET /h1"},
		{"http " + n.ip("api") + " " + N("api") + " GET /h2"},
		{"https " + n.ip("cdn-sub") + " " + N("cdn-sub") + " GET /h3"},
		{"http " + n.ip("cdn-deep") + " " + N("cdn-deep") + " GET /h4"},
		{"http " + n.ip("inside") + " ", " GET /h12"},
		{"http " + n.ip("inside") + " " + N("inside") + " GET /h13"},
		{"ssh " + n.ip("git")}, {"ssh " + n.ip("api")},
		{"https " + n.ip("git") + " " + N("git") + " ", "/repo.git/"},
	} {
		if len(n.lines(want...)) == 0 {
			t.Errorf("the test host did not see %q", want)
		}
	}
	for _, short := range []string{"cdn-apex", "outside", "private"} {
		if l := n.arrivedAt(n.ip(short)); len(l) != 0 {
			t.Errorf("refused %s (%s) reached the test host: %v", N(short), n.ip(short), l)
		}
	}
	if l := n.lines("conn " + n.ip("git") + " 80 "); len(l) != 0 {
		t.Errorf("port 80 of %s (only :22 and :443 allowed) was reached: %v", N("git"), l)
	}
	for _, short := range []string{"outside", "cdn-apex"} {
		if l := n.lines("query " + N(short)); len(l) != 0 {
			t.Errorf("%s, outside the allowlist, was resolved anyway: %v", N(short), l)
		}
	}

	// The denial log: each refusal, attributed to the session.
	for _, want := range []struct {
		host      string
		port      int
		via, addr string
		min       int
	}{
		{N("cdn-apex"), 80, "http", "", 1}, {N("cdn-apex"), 443, "connect", "", 1},
		{N("git"), 80, "http", "", 1}, {N("git"), 80, "socks", "", 1},
		{N("outside"), 80, "http", "", 2}, {N("outside"), 443, "connect", "", 2}, {N("outside"), 22, "socks", "", 1},
		{outsideIP, 80, "http", "", 1}, {outsideIP, 443, "connect", "", 1}, {outsideIP, 22, "socks", "", 1},
		{N("private"), 80, "http", n.ip("private"), 1}, {N("private"), 443, "connect", n.ip("private"), 1},
		{N("loop"), 80, "http", "127.0.0.1", 1},
	} {
		ds := findDenial(dl, want.host, want.port, want.via)
		if len(ds) < want.min {
			t.Errorf("denial log: %d entries for %s:%d via %s, want %d", len(ds), want.host, want.port, want.via, want.min)
			continue
		}
		for _, d := range ds {
			if _, err := time.Parse(time.RFC3339Nano, d.Time); err != nil || d.V != 1 || d.Session != session || d.Decision != "denied" || d.Reason == "" || (want.addr != "" && d.Addr != want.addr) {
				t.Errorf("denial log entry %+v: want v 1, an RFC 3339 time, session %s, decision denied, a reason, addr %q", d, session, want.addr)
			}
		}
	}
	for _, short := range []string{"api", "cdn-sub", "cdn-deep", "inside"} {
		if ds := findDenial(dl, N(short), 443, ""); len(ds) != 0 {
			t.Errorf("allowed requests in the denial log: %+v", ds)
		}
	}
}

// TestSpec36AllowlistEgress (§3.6 egress by host name): in
// network.mode = "allowlist" the sandbox reaches the test host only
// through Lazaret's proxy, by name: HTTPS (CONNECT, the test CA trusted
// end to end: TLS is not intercepted), plain HTTP and SSH-like TCP over
// SOCKS5 (curl's ALL_PROXY too) to allowed names; an exact name with a
// port allows only that port; a wildcard matches subdomains, not its apex;
// a name outside the list, a raw IP and names resolving to a denied or a
// loopback address are refused with a 403 naming the host, the port and
// the key that would allow it, and nothing of them reaches the test host
// (a name outside the list is not even resolved); a name or raw IP inside
// the profile's network.allow works; a direct connect that bypasses the
// proxy fails at once (no route); `git clone` over HTTPS works; the proxy
// variables are set; the denial log lists each refusal with its session,
// and `lazaret status` shows the latest.
func TestSpec36AllowlistEgress(t *testing.T) {
	parallel(t)
	e := need(t)
	n := newEgressNet(t)
	ws := workspace(t)
	writeProbe(t, e, ws)
	cfg := userConfig(t, e, n.allowlistProfile("egress", n.allowlistRules(), fmt.Sprintf("network.allow = [%q]\n", n.allowedPrefix())))
	env := n.caEnv()
	checkConfig(t, ws, cfg, env)
	hold := holdDomainWith(t, ws, "egress", env, "run", "--config", cfg, "-p", "egress", "--", "sleep", "600")
	released := false
	t.Cleanup(func() {
		if !released {
			release(hold)
		}
	})
	script := curlProbe + `for v in HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy NODE_USE_ENV_PROXY GIT_SSH_COMMAND; do echo "env-$v ${!v}"; done
echo "routes $(awk 'NR>1{printf "%s:%s ", $1, $2}' /proc/net/route)"
echo "ifaces $(awk -F: 'NR>2{gsub(/ /,"",$1); printf "%s ", $1}' /proc/net/dev)"
c direct --noproxy '*' http://` + n.ip("api") + `/h17
python3 egress_probe.py direct direct-py ` + n.ip("api") + ` 80
python3 egress_probe.py direct direct-py-private ` + n.ip("private") + ` 80
` + n.proxiedProbes()
	// `lazaret network log --follow` prints refusals as they happen and
	// ends when the Domain stops.
	follow := e.cmd(ws, env, "network", "log", "-p", "egress", "--follow", "--json")
	var followOut bytes.Buffer
	follow.Stdout = &followOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	r := lzEnv(t, ws, env, nil, "run", "--config", cfg, "-p", "egress", "--", "bash", "-c", script)
	t.Logf("probes:\n%s\nstderr: %s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	got := probeLines(r.stdout)

	// The environment: both spellings, the session's label as proxy user
	// (with an empty password or none; git asks for a proxy password when
	// the URL has a user and no password, which the clone below catches).
	label, userinfo := "", ""
	if m := regexp.MustCompile(`^http://((s-[^@:/]+):?)@10\.0\.3\.1:3128$`).FindStringSubmatch(got["env-HTTP_PROXY"]); m != nil {
		userinfo, label = m[1], m[2]
	} else {
		t.Errorf("HTTP_PROXY = %q, want http://s-SESSION:@10.0.3.1:3128", got["env-HTTP_PROXY"])
	}
	for v, want := range map[string]string{
		"http_proxy": "http://" + userinfo + "@10.0.3.1:3128", "HTTPS_PROXY": "http://" + userinfo + "@10.0.3.1:3128", "https_proxy": "http://" + userinfo + "@10.0.3.1:3128",
		"ALL_PROXY": "socks5h://" + userinfo + "@10.0.3.1:1080", "all_proxy": "socks5h://" + userinfo + "@10.0.3.1:1080",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1", "NODE_USE_ENV_PROXY": "1",
	} {
		if got["env-"+v] != want {
			t.Errorf("%s = %q, want %q", v, got["env-"+v], want)
		}
	}
	if g := got["env-GIT_SSH_COMMAND"]; !strings.HasPrefix(g, "ssh -o ") || !strings.Contains(g, "ProxyCommand=") {
		t.Errorf("GIT_SSH_COMMAND = %q, want ssh with a ProxyCommand through the SOCKS proxy", got["env-GIT_SSH_COMMAND"])
	}
	// No default route inside: only the proxy's link.
	for _, rt := range strings.Fields(got["routes"]) {
		if strings.HasSuffix(rt, ":00000000") {
			t.Errorf("the sandbox has a default route (%s); /proc/net/route: %s; interfaces: %s", rt, got["routes"], got["ifaces"])
		}
	}
	// Bypassing the proxy fails at once: no route.
	if l := got["direct"]; field(l, "rc") != "7" || field(l, "code") != "000" {
		t.Errorf("curl --noproxy to the test host: %q, want curl's could-not-connect (7)", l)
	}
	for _, label := range []string{"direct-py", "direct-py-private"} {
		f := strings.Fields(got[label])
		if len(f) != 2 || f[0] != "ENETUNREACH" {
			t.Errorf("%s: %q, want ENETUNREACH", label, got[label])
		} else if us, _ := strconv.Atoi(f[1]); us > 1e6 {
			t.Errorf("%s: the refusal took %d µs, want it at once", label, us)
		}
	}
	dl := networkLog(t, ws, env, "-p", "egress")
	n.checkProxied(t, got, dl, "egress", label)
	if l := n.lines(" GET /h17"); len(l) != 0 {
		t.Errorf("the direct connect bypassing the proxy arrived: %v", l)
	}
	if st := lzEnv(t, ws, env, nil, "status"); st.code != 0 || !strings.Contains(st.stdout, n.name("outside")) {
		t.Errorf("lazaret status does not show the latest denial (%s):\n%s\n%s", n.name("outside"), st.stdout, st.stderr)
	}
	release(hold)
	released = true
	select {
	case err := <-followDone:
		if err != nil {
			t.Errorf("network log --follow: %v", err)
		}
	case <-time.After(30 * time.Second):
		follow.Process.Kill()
		<-followDone
		t.Errorf("network log --follow did not end when the Domain stopped")
	}
	if !strings.Contains(followOut.String(), `"host":"`+n.name("outside")+`"`) {
		t.Errorf("network log --follow did not print the refusal of %s:\n%s", n.name("outside"), followOut.String())
	}
	noLeftovers(t)
	allClean(t, ws, "egress")
}

// TestSpec36AllowlistNpm (§3.6): with the built-in node profile in
// allowlist mode allowing only the test registry's name, `npm install`
// of its package works through the proxy with no further set-up (npm
// takes the proxy from the environment, the test CA through host_ca), the
// installed module loads, and Node's own fetch goes through the proxy
// (NODE_USE_ENV_PROXY) without printing its experimental warning; a name
// outside the list is refused to Node too.
func TestSpec36AllowlistNpm(t *testing.T) {
	parallel(t)
	e := need(t)
	n := newEgressNet(t)
	ws := workspace(t)
	cfg := userConfig(t, e, fmt.Sprintf(`[profiles.node]
network.mode = "allowlist"
network.allow_hosts = [%q, %q]
network.dns = [%q]
`, n.name("npm"), n.name("api"), n.ip("api")))
	checkConfig(t, ws, cfg, n.caEnv())
	script := fmt.Sprintf(`set -e; mkdir -p /tmp/p; cd /tmp/p; echo '{"name":"p","version":"1.0.0","private":true}' > package.json
npm install --no-audit --no-fund --no-update-notifier --registry https://%[1]s/ %[2]s
echo "required $(node -e 'console.log(require("%[2]s"))')"
node -e 'fetch("https://%[3]s/node-fetch").then(r => r.text()).then(t => console.log("fetch " + t.trim()), e => console.log("fetch failed " + e.cause))'
node -e 'fetch("https://%[4]s/node-refused").then(r => console.log("refused " + r.status), e => console.log("refused error " + (e.cause && e.cause.code || e)))'
`, n.name("npm"), npmProbePackage, n.name("api"), n.name("outside"))
	r := lzFor(t, 10*time.Minute, ws, n.caEnv(), nil, "run", "--config", cfg, "-p", "node", "--", "bash", "-c", script)
	t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("npm install through the proxy: exit %d", r.code)
	}
	got := probeLines(r.stdout)
	if got["required"] != n.npmMarker {
		t.Errorf("the installed package exports %q, want %q", got["required"], n.npmMarker)
	}
	if want := "hello from " + n.name("api") + " via https /node-fetch"; got["fetch"] != want {
		t.Errorf("Node fetch through the proxy: %q, want %q", got["fetch"], want)
	}
	if l := got["refused"]; strings.HasPrefix(l, "200") {
		t.Errorf("Node fetch of a name outside the list: %q, want a refusal", l)
	}
	// The built-in profile keeps Node's proxy-agent warning out of the
	// agent's terminal.
	if strings.Contains(r.stderr, "UNDICI-EHPA") || strings.Contains(r.stderr, "EnvHttpProxyAgent is experimental") {
		t.Errorf("Node printed the proxy agent's experimental warning:\n%s", r.stderr)
	}
	time.Sleep(300 * time.Millisecond)
	for _, p := range []string{" GET /" + npmProbePackage, " GET /" + npmProbePackage + "/-/" + npmProbePackage + "-1.0.0.tgz"} {
		if len(n.lines("https "+n.ip("npm")+" "+n.name("npm")+p)) == 0 {
			t.Errorf("the registry did not see%s; arrivals:\n%s", p, strings.Join(n.lines(), "\n"))
		}
	}
	if l := n.arrivedAt(n.ip("outside")); len(l) != 0 {
		t.Errorf("a name outside the list reached the test host: %v", l)
	}
	noLeftovers(t)
}

// askAnswers are the keys typed (then Enter) at the terminal prompt for a
// host outside the allowlist: allow once, allow for this Domain's
// lifetime, deny.
var askAnswers = struct{ once, domain, deny string }{"o", "d", "n"}

// waitAsk waits for the approval prompt for host at the pane: a line that
// names host and is not the typed curl command.
func waitAsk(t *testing.T, m *tmuxTerm, pane, host string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var screen string
	for time.Now().Before(deadline) {
		screen = m.capture(pane)
		if askShown(screen, host) {
			return screen
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no approval prompt for %s within %s; pane:\n%s", host, timeout, screen)
	return ""
}

func askShown(screen, host string) bool {
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, host) && !strings.Contains(l, "curl ") {
			return true
		}
	}
	return false
}

// TestSpec36AllowlistAsk (§3.6 with network.ask, §3.7 routing): a request
// for a host outside the allowlist from a terminal session pauses and asks
// at that terminal; "once" lets that request through and asks again next
// time, a denial refuses it (403), "for this Domain" lets it and later
// requests through without asking; a non-interactive session is refused at
// once without a prompt. Refused requests never reach the test host, the
// denial log records how each was decided, and the audit records the
// decisions.
func TestSpec36AllowlistAsk(t *testing.T) {
	parallel(t)
	e := need(t)
	n := newEgressNet(t)
	ws := workspace(t)
	cfg := userConfig(t, e, n.allowlistProfile("askn", []string{n.name("api")}, "network.ask = true\n"))
	checkConfig(t, ws, cfg, nil)
	outside, dom := n.name("outside"), n.name("dom")
	m := newTmux(t, ws, 160, 40)
	m.startLazaret("main", "a", "--config "+cfg+" -p askn")
	m.waitFor("main", "root@", 3*time.Minute)
	get := func(tag, url string) {
		m.line("main", fmt.Sprintf("curl -sS --max-time 120 -o /dev/null -w '%s=%%{http_code}\\n' %s", tag, url))
	}
	fresh := func() {
		m.keys("main", "C-l")
		m.tmux("clear-history", "-t", "main")
		time.Sleep(200 * time.Millisecond)
	}
	// Once: through; asked again next time; denied then.
	get("once1", "http://"+outside+"/ask-once1")
	waitAsk(t, m, "main", outside, 60*time.Second)
	m.line("main", askAnswers.once)
	m.waitLine("main", "once1=200", 60*time.Second)
	fresh()
	get("once2", "http://"+outside+"/ask-once2")
	waitAsk(t, m, "main", outside, 60*time.Second)
	m.line("main", askAnswers.deny)
	m.waitLine("main", "once2=403", 60*time.Second)
	// For this Domain: through, and the next request is not asked.
	fresh()
	get("dom1", "http://"+dom+"/ask-dom1")
	waitAsk(t, m, "main", dom, 60*time.Second)
	m.line("main", askAnswers.domain)
	m.waitLine("main", "dom1=200", 60*time.Second)
	fresh()
	get("dom2", "http://"+dom+"/ask-dom2")
	if pane := m.waitLine("main", "dom2=200", 30*time.Second); askShown(pane, dom) {
		t.Errorf("asked again for %s after an approval for the Domain:\n%s", dom, pane)
	}
	// A non-interactive session (no terminal): refused at once, no prompt.
	start := time.Now()
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "askn", "--", "curl", "-sS", "--max-time", "60", "-o", "/dev/stderr", "-w", "ni=%{http_code}\n", "http://"+outside+"/ask-ni")
	if !strings.Contains(r.stdout, "ni=403") || !strings.Contains(r.stderr, "lazaret: egress to "+outside+":80 denied") {
		t.Errorf("non-interactive request outside the list: %+v, want 403 with the message", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the non-interactive refusal took %s (asked?)", d)
	}
	if askShown(m.capture("main"), outside) {
		t.Errorf("the non-interactive request was asked at the terminal session:\n%s", m.capture("main"))
	}
	// Arrivals: approved ones only.
	time.Sleep(300 * time.Millisecond)
	for _, p := range []string{"/ask-once1", "/ask-dom1", "/ask-dom2"} {
		if len(n.lines(" GET "+p)) == 0 {
			t.Errorf("approved request %s did not reach the test host", p)
		}
	}
	for _, p := range []string{"/ask-once2", "/ask-ni"} {
		if l := n.lines(" GET " + p); len(l) != 0 {
			t.Errorf("refused request %s reached the test host: %v", p, l)
		}
	}
	// The denial log: the terminal's denial, then the non-interactive
	// session's (asked-denied when its label reached the coordinator,
	// which had no terminal to ask; non-interactive when the proxy had no
	// session to ask).
	dl := networkLog(t, ws, nil, "-p", "askn")
	ds := findDenial(dl, outside, 80, "http")
	if len(ds) != 2 || ds[0].Decision != "asked-denied" || (ds[1].Decision != "asked-denied" && ds[1].Decision != "non-interactive") || len(findDenial(dl, dom, 80, "")) != 0 {
		t.Errorf("denial log: want %s:80 denied at the terminal, then for the non-interactive session, and nothing for %s; got %+v", outside, dom, dl)
	}
	a := lz(t, ws, nil, "audit", "--json")
	for _, h := range []string{outside, dom} {
		if !strings.Contains(a.stdout, h) {
			t.Errorf("lazaret audit lacks the decisions for %s:\n%s", h, a.stdout)
		}
	}
	m.line("main", "exit 5")
	m.waitLine("main", "RC-a=5", 30*time.Second)
	m.sttySame("a.before", "a.after")
	m.kill()
	noLeftovers(t)
}
