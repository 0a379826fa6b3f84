package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// escalationConfig writes a configuration whose profile "esc" (busybox)
// auto-approves exactly `true`, `echo …`, `head -c …` and `sleep …`.
func escalationConfig(t *testing.T) string {
	e := need(t)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	body := "[profiles.esc]\nimage = \"busybox\"\nauto_approve = [[\"true\"], [\"echo\"], [\"head\", \"-c\"], [\"sleep\"], [\"pwd\"]]\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)
	return cfg
}

// TestEscalationNonInteractive (§3.7): from a session without a terminal an
// auto-approved command runs on the host with its output and status inside;
// a command no rule approves is denied at once (no terminal to ask);
// `sh -c` never matches a rule; the audit log records each.
func TestEscalationNonInteractive(t *testing.T) {
	cfg := escalationConfig(t)
	ws := workspace(t)
	run := func(args ...string) result {
		return lz(t, ws, nil, append([]string{"run", "--config", cfg, "-p", "esc", "--"}, args...)...)
	}
	// Auto-approved: output and exit status inside.
	r := run("sh", "-c", "mkdir -p sub && cd sub && lazaret-escalate --why 'a test' -- echo hello 'two words'; echo rc=$?; lazaret-escalate -- pwd; lazaret-escalate -- true; echo rc2=$?")
	if r.code != 0 || !strings.Contains(r.stdout, "hello two words\nrc=0\n") || !strings.Contains(r.stdout, filepath.Join(ws, "sub")+"\n") || !strings.Contains(r.stdout, "rc2=0") {
		t.Errorf("auto-approved escalation: %+v", r)
	}
	// No rule, no terminal: denied (77) at once.
	start := time.Now()
	r = run("sh", "-c", "lazaret-escalate -- id; echo rc=$?")
	if !strings.Contains(r.stdout, "rc=77") || !strings.Contains(r.stderr, "no terminal") {
		t.Errorf("unapproved escalation without a terminal: %+v", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("denial took %s", d)
	}
	// A shell never matches a rule, even a rule that names its argument.
	r = run("sh", "-c", "lazaret-escalate -- sh -c 'echo pwned > pwned'; echo rc=$?")
	if !strings.Contains(r.stdout, "rc=77") {
		t.Errorf("sh -c: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Errorf("sh -c ran on the host")
	}
	// Outside the workspace: usage error, nothing sent.
	r = run("sh", "-c", "cd / && lazaret-escalate -- true; echo rc=$?")
	if !strings.Contains(r.stdout, "rc=64") {
		t.Errorf("outside the workspace: %+v", r)
	}
	// Audit.
	a := lz(t, ws, nil, "audit", "--json")
	for _, want := range []string{`"decided_by":"auto-rule"`, `"decided_by":"no-terminal"`, `"outcome":"completed"`, `"outcome":"denied"`, `"event":"execute"`} {
		if !strings.Contains(a.stdout, want) {
			t.Errorf("audit lacks %s:\n%s", want, a.stdout)
		}
	}
	noLeftovers(t)
}

// TestEscalationStreams100MB (§3.7): 100 MB of host output streams
// byte-exact into the sandbox through ≤ 8 unacknowledged 48 KiB chunks.
func TestEscalationStreams100MB(t *testing.T) {
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	const n = 100 << 20
	big := make([]byte, n)
	for i := range big {
		big[i] = byte(i*7 + i>>13)
	}
	if err := os.WriteFile(filepath.Join(ws, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(ws, "big"), e.uid, e.gid)
	sum := sha256.Sum256(big)
	start := time.Now()
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "esc", "--", "sh", "-c", "lazaret-escalate -- head -c 104857600 big | sha256sum; echo rc=$?")
	t.Logf("100 MB through the mailbox in %s", time.Since(start).Round(time.Millisecond))
	if r.code != 0 || !strings.Contains(r.stdout, "rc=0") || !strings.Contains(r.stdout, hex.EncodeToString(sum[:])) {
		t.Errorf("stream: sha256 inside %q, want %x (stderr %q)", r.stdout, sum, r.stderr)
	}
	noLeftovers(t)
}
