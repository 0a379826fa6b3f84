package integration

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/trust"
)

// clientScenarioEnv selects a raw protocol client role of this test binary,
// run as the test user (the coordinator only talks to the developer's uid).
const clientScenarioEnv = "LAZARET_IT_CLIENT"

func init() {
	if sc := os.Getenv(clientScenarioEnv); sc != "" {
		err := runClientScenario(sc, os.Getenv("LAZARET_IT_RUNTIME"), os.Getenv("LAZARET_IT_STATE"))
		if err != nil {
			fmt.Println("RESULT", err)
			os.Exit(1)
		}
		fmt.Println("RESULT ok")
		os.Exit(0)
	}
}

func dialTLS(rt string, pub trust.Publication, cert *tls.Certificate) (*tls.Conn, error) {
	raw, err := net.Dial("unix", filepath.Join(rt, "control.sock"))
	if err != nil {
		return nil, err
	}
	cfg, err := trust.ClientTLSConfig(pub, cert, nil)
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, cfg)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, c.Handshake()
}

// runClientScenario speaks the control protocol by hand against the Domain
// whose runtime directory is rt and reports what the coordinator did.
func runClientScenario(sc, rt, stateFile string) error {
	b, err := os.ReadFile(filepath.Join(rt, "publication.json"))
	if err != nil {
		return err
	}
	var pub trust.Publication
	if err := json.Unmarshal(b, &pub); err != nil {
		return err
	}
	enroll := func() (*tls.Certificate, error) {
		c, err := dialTLS(rt, pub, nil)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		key, _ := trust.NewClientKey(nil)
		csr, _ := trust.NewCSR(key)
		fc := control.NewConn(c)
		fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Enroll{Enroll: &lv1.EnrollRequest{CsrDer: csr}}})
		var f lv1.ServerFrame
		if err := fc.Read(&f); err != nil {
			return nil, err
		}
		if f.GetEnrollment() == nil {
			return nil, fmt.Errorf("no enrollment: %v", f.String())
		}
		cert := trust.ClientCertificate(key, &trust.Enrollment{ClientID: f.GetEnrollment().ClientCliId, CertDER: f.GetEnrollment().CertificateDer})
		return &cert, nil
	}
	switch sc {
	case "run-without-certificate":
		c, err := dialTLS(rt, pub, nil)
		if err != nil {
			return err
		}
		fc := control.NewConn(c)
		fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Run{Run: &lv1.RunRequest{Argv: []string{"true"}}}})
		var f lv1.ServerFrame
		if err := fc.Read(&f); err != nil {
			return fmt.Errorf("closed without an answer: %v", err)
		}
		if e := f.GetError(); e != nil && strings.Contains(e.Message, "may only enroll") {
			return nil
		}
		return fmt.Errorf("RunRequest without a certificate got %v", f.String())
	case "oversized-csr":
		c, err := dialTLS(rt, pub, nil)
		if err != nil {
			return err
		}
		fc := control.NewConn(c)
		fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Enroll{Enroll: &lv1.EnrollRequest{CsrDer: bytes.Repeat([]byte{0x30}, 9000)}}})
		var f lv1.ServerFrame
		if err := fc.Read(&f); err != nil {
			return fmt.Errorf("closed without an answer: %v", err)
		}
		if e := f.GetError(); e != nil && strings.Contains(e.Message, "8192") {
			return nil
		}
		return fmt.Errorf("oversized CSR got %v", f.String())
	case "save-certificate":
		cert, err := enroll()
		if err != nil {
			return err
		}
		js, _ := json.Marshal(map[string][]byte{"cert": cert.Certificate[0], "key": cert.PrivateKey.(interface{ Seed() []byte }).Seed()})
		return os.WriteFile(stateFile, js, 0o600)
	case "stale-certificate":
		js, err := os.ReadFile(stateFile)
		if err != nil {
			return err
		}
		var saved map[string][]byte
		json.Unmarshal(js, &saved)
		key := ed25519Key(saved["key"])
		cert := tls.Certificate{Certificate: [][]byte{saved["cert"]}, PrivateKey: key}
		c, err := dialTLS(rt, pub, &cert)
		if err == nil {
			fc := control.NewConn(c)
			fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Status{Status: &lv1.StatusRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1}}})
			var f lv1.ServerFrame
			if err := fc.Read(&f); err == nil && f.GetStatus() != nil {
				return fmt.Errorf("a previous generation's certificate was served")
			}
		}
		return nil
	case "malformed-frames":
		cert, err := enroll()
		if err != nil {
			return err
		}
		for _, garbage := range [][]byte{
			binary.BigEndian.AppendUint32(nil, 1<<30),                             // absurd length
			append(binary.BigEndian.AppendUint32(nil, 4), 0xff, 0xff, 0xff, 0xff), // not protobuf
			{0, 0}, // truncated header
		} {
			c, err := dialTLS(rt, pub, cert)
			if err != nil {
				return err
			}
			c.Write(garbage)
			c.CloseWrite()
			buf := make([]byte, 1)
			c.Read(buf)
			c.Close()
		}
		// The coordinator still serves.
		c, err := dialTLS(rt, pub, cert)
		if err != nil {
			return fmt.Errorf("after malformed frames: %v", err)
		}
		fc := control.NewConn(c)
		fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Status{Status: &lv1.StatusRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1}}})
		var f lv1.ServerFrame
		if err := fc.Read(&f); err != nil || f.GetStatus() == nil {
			return fmt.Errorf("no status after malformed frames: %v %v", err, f.String())
		}
		return nil
	}
	return fmt.Errorf("unknown scenario %q", sc)
}

// clientScenario runs a raw protocol scenario as the test user against the
// Domain of ws and returns its RESULT line.
func clientScenario(t *testing.T, user *env, ws, scenario, stateFile string) string {
	t.Helper()
	self, _ := os.Executable()
	dst := filepath.Join(user.base, "integration.test")
	clientCopy.Lock() // scenarios in parallel: one copy, whole before use
	if _, err := os.Stat(dst); err != nil {
		data, err := os.ReadFile(self)
		if err != nil {
			clientCopy.Unlock()
			t.Fatal(err)
		}
		os.WriteFile(dst+".tmp", data, 0o755)
		os.Rename(dst+".tmp", dst)
	}
	clientCopy.Unlock()
	rt := filepath.Join(user.runtime, "lazaret", string(domainOf(ws, "tiny")))
	if _, err := os.Stat(filepath.Join(rt, "publication.json")); err != nil {
		t.Fatalf("no published Domain for %s", ws)
	}
	var out []byte
	var err error
	for attempt := 0; ; attempt++ {
		c := exec.Command(dst, "-test.run=^$")
		c.Env = []string{clientScenarioEnv + "=" + scenario, "LAZARET_IT_RUNTIME=" + rt, "LAZARET_IT_STATE=" + stateFile, "HOME=" + user.home}
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(user.uid), Gid: uint32(user.gid)}}
		out, err = c.CombinedOutput()
		// A child another parallel test forked while the copy above was
		// open for writing holds that descriptor until it execs: exec of
		// the copy fails with ETXTBSY meanwhile (golang/go#22315).
		if errors.Is(err, syscall.ETXTBSY) && attempt < 100 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		break
	}
	for _, line := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "RESULT "); ok {
			return r
		}
	}
	return fmt.Sprintf("no result (%v): %s", err, out)
}

// clientCopy serialises clientScenario's copy of the test binary.
var clientCopy sync.Mutex

// holdDomain starts a long session in ws and waits until it runs.
func holdDomain(t *testing.T, e *env, ws string) *exec.Cmd {
	t.Helper()
	c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo up; sleep 120")
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatalf("holding session did not start: %v", err)
	}
	return c
}

func release(c *exec.Cmd) {
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
}

// TestControlPlaneAuthentication (spec §3.2 "Protocol cryptography
// refinement"): a connection without a client certificate may only enroll;
// an oversized CSR is refused; a certificate of a previous generation is
// refused; malformed frames never crash the coordinator.
func TestControlPlaneAuthentication(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	hold := holdDomain(t, e, ws)
	// The sandbox key's host source is unlinked once the sandbox holds the
	// mount; a session joining afterwards still reads the key inside, and
	// no other private key is there.
	if srcs, _ := filepath.Glob(filepath.Join(e.runtime, "lazaret", string(domainOf(ws, "tiny")), "credentials", "sandbox.key")); len(srcs) != 0 {
		t.Errorf("sandbox key source still on the host: %v", srcs)
	}
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "head -1 /.lazaret/credentials/sandbox.key; ls /.lazaret/credentials; grep -rl 'PRIVATE KEY' /.lazaret 2>/dev/null")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "-----BEGIN PRIVATE KEY-----\n") || !strings.HasSuffix(r.stdout, "\nsandbox.key\n/.lazaret/credentials/sandbox.key\n") {
		t.Errorf("sandbox key after unlink: %+v", r)
	}
	for _, sc := range []string{"run-without-certificate", "oversized-csr", "malformed-frames"} {
		if r := clientScenario(t, e, ws, sc, ""); r != "ok" {
			t.Errorf("%s: %s", sc, r)
		}
	}
	saved := filepath.Join(e.userDir("certs-"+randHex(3)), "cert.json")
	if r := clientScenario(t, e, ws, "save-certificate", saved); r != "ok" {
		t.Fatalf("enroll: %s", r)
	}
	release(hold)
	noLeftovers(t)
	hold = holdDomain(t, e, ws) // the next generation
	if r := clientScenario(t, e, ws, "stale-certificate", saved); r != "ok" {
		t.Errorf("previous generation's certificate: %s", r)
	}
	release(hold)
	noLeftovers(t)
}

// TestConcurrentSessions (spec §3.2, issue: two then eight sessions): many
// sessions of one Domain run at once, each with its own exit status, and
// the Domain stops when the last leaves.
func TestConcurrentSessions(t *testing.T) {
	parallel(t)
	e := need(t)
	for _, n := range []int{2, 8} {
		ws := workspace(t)
		var wg sync.WaitGroup
		results := make([]result, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i] = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", fmt.Sprintf("sleep 1; echo session-%d; exit %d", i, 10+i))
			}(i)
		}
		wg.Wait()
		for i, r := range results {
			if r.code != 10+i || r.stdout != fmt.Sprintf("session-%d\n", i) {
				t.Errorf("%d sessions: session %d got %+v", n, i, r)
			}
		}
		logs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if strings.Contains(string(b), "workspace="+ws) && strings.Count(string(b), "host coordinator started") > 1 {
				// Sessions may straddle a teardown only if one ended before
				// another registered; with sleep 1 they overlap.
				t.Logf("%d sessions used %d generations", n, strings.Count(string(b), "host coordinator started"))
			}
		}
		noLeftovers(t)
	}
}

// TestJoinRefusals: a joining session with another configuration is refused
// with what changed; another user cannot reach the control socket; two
// workspaces run two Domains at once.
func TestJoinRefusals(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	hold := holdDomain(t, e, ws)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	os.WriteFile(cfg, []byte("[profiles.tiny]\nenv = { EXTRA = \"1\" }\n"), 0o600)
	os.Chown(cfg, e.uid, e.gid)
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "tiny", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "EXTRA") || !strings.Contains(r.stderr, "Wait for its sessions to end (the Domain then stops) or undo the change; `lazaret stop -p tiny -C "+ws+"` ends the Domain and its sessions now") {
		t.Errorf("configuration mismatch: %+v", r)
	}
	t.Logf("mismatch refusal: %s", strings.TrimSpace(r.stderr))
	// Another uid (nobody) cannot even reach the socket.
	rts, _ := filepath.Glob(filepath.Join(e.runtime, "lazaret", string(domainOf(ws, "tiny")), "control.sock"))
	if len(rts) != 1 {
		t.Fatalf("sockets: %v", rts)
	}
	probe := exec.Command("/bin/sh", "-c", "exec 3<>/dev/null; cat < "+rts[0])
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := probe.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("another uid reached the control socket: %v %s", err, out)
	}
	// A second workspace: a second Domain, concurrently.
	ws2 := workspace(t)
	if r := lz(t, ws2, nil, "run", "-p", "tiny", "--", "echo", "second"); r.code != 0 || r.stdout != "second\n" {
		t.Errorf("second Domain: %+v", r)
	}
	release(hold)
	noLeftovers(t)
}

// TestJoinDuringStartup: a session that arrives while the Domain is still
// starting waits and then joins the same generation.
func TestJoinDuringStartup(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	first := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "sleep 2; echo first")
	var out1 bytes.Buffer
	first.Stdout = &out1
	first.Start()
	// The first CLI's coordinator holds the Domain: a later session joins
	// (or, mismatched, is refused) instead of starting its own.
	hcStarted := func() bool {
		logs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if strings.Contains(string(b), "workspace="+ws) && strings.Contains(string(b), "host coordinator started") {
				return true
			}
		}
		return false
	}
	if !waitUntil(time.Minute, 20*time.Millisecond, hcStarted) {
		t.Fatal("the first session's coordinator did not start")
	}
	// A session with another configuration arriving meanwhile is refused
	// at once, whether the generation is still starting or already runs
	// (the model's RejectConfigurationMismatch in either phase).
	recordModelTrace(t, "RejectConfigurationMismatch")
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	os.WriteFile(cfg, []byte("[profiles.tiny]\nenv = { EXTRA = \"1\" }\n"), 0o600)
	os.Chown(cfg, e.uid, e.gid)
	mismatched := e.cmd(ws, nil, "run", "--config", cfg, "-p", "tiny", "--", "true")
	var mErr bytes.Buffer
	mismatched.Stderr = &mErr
	if err := mismatched.Start(); err != nil {
		t.Fatal(err)
	}
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "second")
	first.Wait()
	mismatched.Wait()
	if r.code != 0 || r.stdout != "second\n" || out1.String() != "first\n" {
		t.Fatalf("join during start-up: %+v / %q", r, out1.String())
	}
	if code := mismatched.ProcessState.ExitCode(); code != 125 || !strings.Contains(mErr.String(), "EXTRA") {
		t.Errorf("mismatched session during start-up: exit %d, stderr %q", code, mErr.String())
	}
	logs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if strings.Contains(string(b), "workspace="+ws) && strings.Count(string(b), "host coordinator started") != 1 {
			t.Errorf("join during start-up started %d coordinators", strings.Count(string(b), "host coordinator started"))
		}
	}
	noLeftovers(t)
}

// TestSpec32MismatchWhileStarting: a session with another configuration
// that arrives while the Domain is still starting for another run is
// refused at once, and the refusal says so (not "wait for its sessions"):
// the start is held for seconds by a runsc wrapper that delays `runsc run`
// (fault injection: the real runsc runs after the delay).
func TestSpec32MismatchWhileStarting(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	wrapper := runscWrapper(t, e, e.userDir("slow-runsc-"+randHex(3)), fmt.Sprintf("for a in \"$@\"; do [ \"$a\" = run ] && { sleep 3; break; }; done\nexec %s \"$@\"", e.runsc))
	slow := []string{"LAZARET_RUNSC=" + wrapper}
	first := e.cmd(ws, slow, "run", "-p", "tiny", "--", "echo", "first")
	var out1, err1 bytes.Buffer
	first.Stdout, first.Stderr = &out1, &err1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	starting := func() bool {
		doc, _ := onlyStatus(t, ws, "-C", ws, "-p", "tiny")
		return doc != nil && doc["state"] == "starting"
	}
	if !waitUntil(time.Minute, 20*time.Millisecond, starting) {
		first.Process.Kill()
		first.Wait()
		t.Fatalf("the Domain was never seen starting; first run: %s", err1.String())
	}
	recordModelTrace(t, "RejectConfigurationMismatch")
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	os.WriteFile(cfg, []byte("[profiles.tiny]\nenv = { EXTRA = \"1\" }\n"), 0o600)
	os.Chown(cfg, e.uid, e.gid)
	r := lzEnv(t, ws, slow, nil, "run", "--config", cfg, "-p", "tiny", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "EXTRA") || !strings.Contains(r.stderr, "It is starting for another `lazaret run`: wait for that run to end") || strings.Contains(r.stderr, "Wait for its sessions") {
		t.Errorf("mismatched session while the Domain starts: %+v", r)
	}
	if err := first.Wait(); err != nil || out1.String() != "first\n" {
		t.Errorf("the starting run: %v %q %s", err, out1.String(), err1.String())
	}
	noLeftovers(t)
}

func ed25519Key(seed []byte) any { return ed25519.NewKeyFromSeed(seed) }

// TestStatus (issue: inspectability): `lazaret status --json` reports a
// running Domain through its Host Coordinator (generation, state, sessions,
// process identities) and a stopped one from its identity. The table lists
// the running Domains first; a stopped one only with --all, or when -C/-p
// select it (issue 25: the status of the Domain a `lazaret run` here uses).
func TestStatus(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	hold := holdDomain(t, e, ws)
	r := lz(t, ws, nil, "status", "--json")
	var docs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &docs); err != nil || r.code != 0 {
		t.Fatalf("status: %v %+v", err, r)
	}
	var mine map[string]any
	for _, d := range docs {
		if d["workspace"] == ws {
			mine = d
		}
	}
	if mine == nil || mine["state"] != "running" || mine["runtime_supervisor"] == nil || mine["generation"] == nil {
		t.Fatalf("running Domain not reported: %v", mine)
	}
	if s, _ := mine["sessions"].([]any); len(s) != 1 {
		t.Errorf("sessions: %v", mine["sessions"])
	}
	for _, args := range [][]string{{"status"}, {"status", "-p", "tiny"}, {"status", "-C", ws}} {
		if r := lz(t, ws, nil, args...); r.code != 0 || !strings.Contains(r.stdout, ws) || !strings.Contains(r.stdout, "running") {
			t.Errorf("%v while it runs: %+v", args, r)
		}
	}
	release(hold)
	noLeftovers(t)
	// Stopped: left out of the default list, which says how to see it.
	r = lz(t, ws, nil, "status")
	if r.code != 0 || strings.Contains(r.stdout, ws+"\n") || !strings.Contains(r.stdout, "lazaret status --all") {
		t.Errorf("status lists the stopped Domain, or does not say how to see it: %+v", r)
	}
	r = lz(t, ws, nil, "status", "--json")
	if strings.Contains(r.stdout, `"workspace": "`+ws+`"`) || strings.Contains(r.stdout, `"workspace":"`+ws+`"`) {
		t.Errorf("status --json lists the stopped Domain: %s", r.stdout)
	}
	// -C (or -p) selects it whatever its state; --all lists it too. A
	// stopped Domain has no generation: "-", like its other empty fields.
	for _, args := range [][]string{{"status", "-C", ws}, {"status", "-p", "tiny"}, {"status", "--all"}} {
		r = lz(t, ws, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, ws) || !strings.Contains(r.stdout, "stopped") {
			t.Errorf("%v: stopped Domain not listed: %+v", args, r)
		}
		for _, l := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[len(f)-1] == ws && (f[2] != "stopped" || f[3] != "-" || strings.Contains(l, "<nil>")) {
				t.Errorf("%v: stopped Domain's row: %q, want state stopped and generation -", args, l)
			}
		}
	}
	if doc, r := onlyStatus(t, ws, "-C", ws); doc == nil || doc["workspace"] != ws || doc["state"] != "stopped" {
		t.Errorf("status -C --json of the stopped Domain: %+v", r)
	}
	// A profile with no Domain here, and one that does not exist.
	if r = lz(t, ws, nil, "status", "-p", "default"); r.code != 0 || !strings.Contains(r.stdout, "no Domain of profile default for the workspace "+ws+" yet") {
		t.Errorf("status -p default: %+v", r)
	}
	if r = lz(t, ws, nil, "status", "-p", "nope"); r.code != 0 || !strings.Contains(r.stdout, `unknown profile "nope"`) {
		t.Errorf("status -p nope: %+v", r)
	}
	if r = lz(t, ws, nil, "status", "--all", "-p", "tiny"); r.code != 2 {
		t.Errorf("status --all -p: %+v, want a usage error", r)
	}
	noLeftovers(t)
}
