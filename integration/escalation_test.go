package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// escalationConfig writes a configuration whose profile "esc" (busybox)
// auto-approves exactly `true`, `echo …`, `head -c …` and `sleep …`.
func escalationConfig(t *testing.T) string {
	return userConfig(t, need(t), "[profiles.esc]\nimage = \"busybox\"\nauto_approve = [[\"true\"], [\"echo\"], [\"head\", \"-c\"], [\"sleep\"], [\"pwd\"]]\n")
}

// TestEscalationNonInteractive (§3.7): from a session without a terminal an
// auto-approved command runs on the host with its output and status inside;
// a command no rule approves is denied at once (no terminal to ask);
// `sh -c` never matches a rule; the audit log records each.
func TestEscalationNonInteractive(t *testing.T) {
	parallel(t)
	recordModelTrace(t, "ReceiveEscalation", "AutoApprove", "StartHostExecution", "CompleteHostExecution", "QueuePrompt", "DeveloperDeny", "DeliverResult")
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

// TestEscalationRules (§3.7 auto-approve rules): an exact rule approves
// exactly its argv — the same argv with one more argument is not approved
// and, without a terminal, is denied with the reason; a cwd constraint is
// honoured from its directory and (cwd_subtree) beneath it, and refused at
// the workspace root, in a sibling with the same name prefix and beneath a
// directory that is constrained exactly; the version-1 shorthand (a bare
// argv, a prefix rule) still works.
func TestEscalationRules(t *testing.T) {
	parallel(t)
	recordModelTrace(t, "ReceiveEscalation", "AutoApprove", "QueuePrompt", "DeveloperDeny", "DeliverResult")
	e := need(t)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	body := `[profiles.rules]
image = "busybox"
auto_approve = [
  {exact = ["echo", "exact-ok"]},
  {prefix = ["pwd"], cwd = "sub", cwd_subtree = true},
  {exact = ["echo", "here"], cwd = "sub"},
  ["true"],
]
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)
	// Two workspaces (two Domains): the model's fixture holds at most
	// lazaret.MaxRequests Escalation Requests per Domain.
	ws, ws2 := workspace(t), workspace(t)
	script := `mkdir -p sub/deeper sub2
lazaret-escalate -- echo exact-ok; echo rc1=$?
lazaret-escalate -- echo exact-ok extra; echo rc2=$?
(cd sub/deeper && lazaret-escalate -- pwd; echo rc3=$?)
(cd sub && lazaret-escalate -- pwd -P; echo rc4=$?)
lazaret-escalate -- pwd; echo rc5=$?
`
	script2 := `mkdir -p sub/deeper sub2
(cd sub2 && lazaret-escalate -- pwd; echo rc6=$?)
(cd sub && lazaret-escalate -- echo here; echo rc7=$?)
(cd sub/deeper && lazaret-escalate -- echo here; echo rc8=$?)
lazaret-escalate -- true; echo rc9=$?
`
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "rules", "--", "sh", "-c", script)
	r2 := lz(t, ws2, nil, "run", "--config", cfg, "-p", "rules", "--", "sh", "-c", script2)
	r.stdout += r2.stdout
	r.stderr += r2.stderr
	want := []string{
		"exact-ok\nrc1=0\n",
		"rc2=77\n",
		filepath.Join(ws, "sub", "deeper") + "\nrc3=0\n",
		filepath.Join(ws, "sub") + "\nrc4=0\n",
		"rc5=77\n",
		"rc6=77\n",
		"here\nrc7=0\n",
		"rc8=77\n",
		"rc9=0\n",
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", w, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "exact-ok extra") {
		t.Errorf("the exact rule approved an extra argument:\n%s", r.stdout)
	}
	// Every refusal says why: no terminal to ask and no rule matches.
	if n := strings.Count(r.stderr, "denied: the session has no terminal to ask the developer and no auto_approve rule matches"); n != 4 {
		t.Errorf("%d denials with the reason, want 4:\n%s", n, r.stderr)
	}
	a := lz(t, ws, nil, "audit", "--json")
	for _, w := range []string{`"rule_spec":"exact [\"echo\" \"exact-ok\"]"`, `"rule_spec":"prefix [\"pwd\"] in /workspace/sub and beneath"`} {
		if !strings.Contains(a.stdout, w) {
			t.Errorf("audit lacks %s:\n%s", w, a.stdout)
		}
	}
	noLeftovers(t)
}

// TestEscalationStreams100MB (§3.7): 100 MB of host output streams
// byte-exact into the sandbox through ≤ 8 unacknowledged 48 KiB chunks.
func TestEscalationStreams100MB(t *testing.T) {
	parallel(t)
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

// userProcs lists (pid, cmdline) of the scenario's own processes of the
// test user (ownProcs) whose command line contains sub. A host command
// is the scenario's: the Host Coordinator's child, run in the workspace.
func userProcs(t *testing.T, sub string) map[int]string {
	t.Helper()
	e := need(t)
	out := map[int]string{}
	for _, up := range ownProcs(e, t) {
		if up.uid != e.uid {
			continue
		}
		if cl := strings.Join(up.args, " "); strings.Contains(cl, sub) {
			out[up.pid] = cl
		}
	}
	return out
}

// rssKiB reads a process's VmRSS.
func rssKiB(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return 0
}

// TestEscalationTerminal (§3.7, DX-4) in real terminals: a request is shown
// only at the requesting session's terminal (the other session's screen is
// untouched) with profile, session, quoted argv, cwd and justification;
// approve runs it and its output and status arrive inside; deny returns 77;
// edit-and-approve runs the edited argv; Ctrl-C inside cancels and the host
// process is killed and reaped.
func TestEscalationTerminal(t *testing.T) {
	parallel(t)
	recordModelTrace(t, "BeginPrompt", "DeveloperApprove", "DeveloperDeny", "StartHostExecution", "CompleteHostExecution", "CancelRequest", "DeliverResult")
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	m := newTmux(t, ws, 120, 40)
	m.newSession("other", ws, 120, 40)
	m.startLazaret("main", "a", "--config "+cfg+" -p esc")
	m.waitFor("main", "/workspace #", 3*time.Minute)
	m.startLazaret("other", "b", "--config "+cfg+" -p esc")
	m.waitFor("other", "/workspace #", 3*time.Minute)
	m.line("other", "echo other-$((20+1))")
	m.waitLine("other", "other-21", 10*time.Second)
	otherBefore := m.capture("other")

	// Approve.
	m.line("main", "lazaret-escalate --why 'needs the host uid' -- id -u; echo rc=$?")
	pane := m.waitFor("main", "Run on the host?", 30*time.Second)
	for _, want := range []string{"profile: esc", "command: 'id' '-u'", "cwd:     /workspace", "why:     needs the host uid", "session: "} {
		if !strings.Contains(pane, want) {
			t.Errorf("prompt lacks %q:\n%s", want, pane)
		}
	}
	if got := m.capture("other"); got != otherBefore || strings.Contains(got, "escalation") {
		t.Errorf("the other session's screen changed during the prompt:\n%s", got)
	}
	m.line("main", "y")
	m.waitLine("main", strconv.Itoa(e.uid), 30*time.Second)
	m.waitLine("main", "rc=0", 10*time.Second)

	// Deny. (Each step clears the last one's prompt before it waits for
	// its own: a prompt still on the screen would be answered early, and the
	// answer would reach the sandbox instead.)
	m.clearScreen("main", "Run on the host?")
	m.line("main", "lazaret-escalate -- id -u; echo rc=$?")
	m.waitFor("main", "Run on the host?", 30*time.Second)
	m.line("main", "n")
	m.waitLine("main", "rc=77", 30*time.Second)

	// Edit and approve: the edited argv runs.
	m.clearScreen("main", "Run on the host?")
	m.line("main", "lazaret-escalate -- id -u; echo rc=$?")
	m.waitFor("main", "Run on the host?", 30*time.Second)
	m.line("main", "e")
	m.waitFor("main", "command> id -u", 10*time.Second)
	m.keys("main", "C-u")
	m.line("main", "echo 'edited ok'")
	m.waitLine("main", "edited ok", 30*time.Second)
	m.waitLine("main", "rc=0", 10*time.Second)

	// Ctrl-C cancels an (auto-approved) running host command: killed.
	m.keys("main", "C-l")
	m.line("main", "lazaret-escalate -- sleep 7777; echo rc=$?")
	deadline := time.Now().Add(30 * time.Second)
	for len(userProcs(t, "sleep 7777")) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if len(userProcs(t, "sleep 7777")) == 0 {
		t.Fatalf("the host command never started:\n%s", m.capture("main"))
	}
	m.keys("main", "C-c")
	m.waitLine("main", "rc=130", 30*time.Second)
	if p := userProcs(t, "sleep 7777"); len(p) != 0 {
		t.Errorf("host process survived cancellation: %v", p)
	}
	if got := m.capture("other"); got != otherBefore {
		t.Errorf("the other session's screen changed:\n%s", got)
	}
	m.line("other", "exit 3")
	m.waitLine("other", "RC-b=3", 30*time.Second)
	m.line("main", "exit 4")
	m.waitLine("main", "RC-a=4", 30*time.Second)
	m.sttySame("a.before", "a.after")
	// The session's command itself escalates at once (before its terminal
	// loop may run): still asked at its terminal, not denied.
	m.clearScreen("main", "Run on the host?")
	m.startLazaret("main", "c", "--config "+cfg+" -p esc -- lazaret-escalate -- id -u")
	m.waitFor("main", "Run on the host?", 3*time.Minute)
	m.line("main", "y")
	m.waitLine("main", strconv.Itoa(e.uid), 30*time.Second)
	m.waitLine("main", "RC-c=0", 30*time.Second)
	m.sttySame("c.before", "c.after")
	m.kill()
	noLeftovers(t)
}

// TestEscalationHCMemoryBounded: streaming 100 MB grows the Host
// Coordinator's RSS by less than 64 MiB (at most eight 48 KiB chunks wait
// for acknowledgement; the host pipes are not read beyond that).
func TestEscalationHCMemoryBounded(t *testing.T) {
	parallel(t)
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	hold := e.cmd(ws, nil, "run", "--config", cfg, "-p", "esc", "--", "sh", "-c", "echo up; sleep 300")
	stdout, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer release(hold)
	buf := make([]byte, 3)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatalf("holding session did not start: %v", err)
	}
	var hc int
	for pid, cl := range userProcs(t, "lazaret-hc") {
		f := strings.Fields(cl)
		if strings.HasPrefix(filepath.Base(f[0]), "lazaret-hc") && (len(f) < 2 || !strings.HasPrefix(f[1], "__lazaret-")) { // not a hidden role (the Git-routing daemon)
			hc = pid
		}
	}
	if hc == 0 {
		t.Fatal("no lazaret-hc process of the test user")
	}
	base := rssKiB(hc)
	peak := base
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if r := rssKiB(hc); r > peak {
					peak = r
				}
			}
		}
	}()
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "esc", "--", "sh", "-c", "lazaret-escalate -- head -c 104857600 /dev/zero | wc -c")
	close(stop)
	<-sampled
	t.Logf("HC RSS %d KiB before, peak %d KiB while streaming 100 MB", base, peak)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "104857600" {
		t.Errorf("stream: %+v", r)
	}
	if peak-base >= 64<<10 {
		t.Errorf("HC RSS grew by %d KiB (≥ 64 MiB)", peak-base)
	}
	release(hold)
	noLeftovers(t)
}

// TestSpec37EscalationCwdSwapStaysInWorkspace (§3.7): the working
// directory of an approved host command is checked once and entered
// through the held descriptor. The attack: while an auto-approved `pwd`
// is asked for 1,000 times from /workspace/sub, the sandbox swaps sub for
// a symlink to a host directory outside the workspace as fast as it can.
// No host command may ever run outside the workspace; a request that meets
// the symlink is refused instead.
//
// It runs alone (not parallel(t)): the attack is CPU-bound, with no wait
// to shorten (1,000 guest process starts, host forks and mailbox round
// trips against a busy swap loop), so beside other scenarios on a
// two-core machine it only takes longer; run so under load it reached
// its twelve-minute bound.
func TestSpec37EscalationCwdSwapStaysInWorkspace(t *testing.T) {
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	outside := e.userDir("outside-" + randHex(3))
	script := `mkdir -p sub && cd sub
( cd /workspace; while [ ! -e stop ]; do mv sub s2 2>/dev/null; ln -s ` + outside + ` sub 2>/dev/null; rm -f sub; mv s2 sub 2>/dev/null; done ) &
i=0; ok=0; refused=0
while [ $i -lt 1000 ]; do
  if lazaret-escalate -- pwd; then ok=$((ok+1)); else refused=$((refused+1)); fi
  i=$((i+1))
done
touch /workspace/stop; wait
echo "done ok=$ok refused=$refused"`
	// ~0.1–0.5 s per attempt on a 2-core machine, the swap loop included.
	r := lzFor(t, 12*time.Minute, ws, nil, nil, "run", "--config", cfg, "-p", "esc", "--", "sh", "-c", script)
	if !strings.Contains(r.stdout, "done ok=") {
		t.Fatalf("attack did not finish: exit %d\nstdout tail: %.2000s\nstderr tail: %.2000s", r.code, tail(r.stdout, 2000), tail(r.stderr, 2000))
	}
	ran := 0
	for _, l := range strings.Split(r.stdout, "\n") {
		if !strings.HasPrefix(l, "/") {
			continue
		}
		ran++
		if l != ws && !strings.HasPrefix(l, ws+"/") {
			t.Errorf("an approved host command ran in %s, outside the workspace %s", l, ws)
		}
	}
	// A command approved in a checked directory starts in exactly that
	// directory: it can never find it gone (entering it again by name, a
	// swap in between made the start fail — or, with the symlink there,
	// land outside).
	if n := strings.Count(r.stderr, "spawn /usr/bin/pwd: no such file or directory"); n != 0 {
		t.Errorf("%d approved commands lost their checked working directory between the check and the start", n)
	}
	t.Logf("%s; %d host commands ran, all in the workspace", strings.TrimSpace(r.stdout[strings.LastIndex(r.stdout, "done "):]), ran)
	if ran == 0 {
		t.Errorf("no escalation ran at all: the attack proved nothing\n%s", tail(r.stderr, 2000))
	}
	noLeftovers(t)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestSpec37PromptCancelledWhenSessionCloses (§3.3 close handshake, §3.7):
// a session whose command exits while its escalation prompt is shown
// cancels the prompt; the developer's "y" typed afterwards starts nothing
// on the host, and the audit records the request as cancelled.
func TestSpec37PromptCancelledWhenSessionCloses(t *testing.T) {
	parallel(t)
	recordModelTrace(t, "BeginPrompt", "CancelRequest", "DeliverResult")
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	marker := filepath.Join(e.base, "closing-marker-"+randHex(3))
	m := newTmux(t, ws, 120, 40)
	m.startLazaret("main", "a", "--config "+cfg+" -p esc -- sh -c 'lazaret-escalate -- mkdir "+marker+" & sleep 2; touch /workspace/exited'")
	m.waitFor("main", "Run on the host?", 3*time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(ws, "exited")); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The session's command has exited; give the coordinator the moment it
	// takes to see its exec client end (the fixed build says so at once).
	deadline = time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(m.capture("main"), "escalation request closed") {
		time.Sleep(50 * time.Millisecond)
	}
	m.line("main", "y")
	m.waitFor("main", "RC-a=", 60*time.Second)
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the host command ran after its session closed (%s exists)", marker)
	}
	if pane := m.capture("main"); !strings.Contains(pane, "escalation request closed: the session closed while the prompt was shown") {
		t.Errorf("the CLI did not say the prompt was closed:\n%s", pane)
	}
	a := lz(t, ws, nil, "audit", "--json")
	if !strings.Contains(a.stdout, "the session closed while its prompt was shown") {
		t.Errorf("audit lacks the cancellation:\n%s", a.stdout)
	}
	m.kill()
	noLeftovers(t)
}

// waitHostProcess waits until a process of the scenario whose command
// line contains sub exists (present) or none does (!present).
func waitHostProcess(t *testing.T, sub string, present bool, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if (len(userProcs(t, sub)) > 0) == present {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpec33HostProcessRouteHoldsTerminal (§3.3 terminal routing, §3.7):
// while an auto-approved host command of an interactive session runs, the
// session's route is HostProcess — the CLI shows the command's status,
// keystrokes typed into that terminal never reach the guest (a guest `cat`
// reading the terminal gets none of them), and the guest's terminal output
// of that time is held (the coordinator does not read the PTY) and
// delivered, complete and in order, once the host process has ended; then
// the terminal is the sandbox's again.
func TestSpec33HostProcessRouteHoldsTerminal(t *testing.T) {
	parallel(t)
	recordModelTrace(t, "AutoApprove", "StartHostExecution", "CompleteHostExecution", "DeliverResult")
	cfg := escalationConfig(t)
	ws := workspace(t)
	m := newTmux(t, ws, 120, 40)
	m.startLazaret("main", "a", "--config "+cfg+" -p esc")
	m.waitFor("main", "/workspace #", 3*time.Minute)
	// The ticker starts a second after the request and finishes well
	// before the host's `sleep 8` ends; the foreground cat reads the
	// terminal the whole time.
	m.line("main", "(sleep 1; for i in 1 2 3 4 5 6; do echo tick-$i; sleep 0.3; done; touch /workspace/ticked) & lazaret-escalate -- sleep 8 & cat > /workspace/typed; wait; echo all-done")
	if !waitHostProcess(t, "sleep 8", true, 30*time.Second) {
		t.Fatalf("the host command never started:\n%s", m.capture("main"))
	}
	status := "[lazaret] host command running: 'sleep' '8' (auto-approved"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(m.capture("main"), status) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(m.capture("main"), status) {
		t.Errorf("the CLI shows no status of the running host command:\n%s", m.capture("main"))
	}
	m.line("main", "typed-during-host")
	m.keys("main", "C-d") // would end the guest's cat if it reached it
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(ws, "ticked")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's ticker did not finish:\n%s", m.capture("main"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	during := m.capture("main")
	hostRan := len(userProcs(t, "sleep 8")) > 0
	if !hostRan {
		t.Fatalf("the host command ended before the guest's ticker finished: the test proves nothing")
	}
	tickLine := regexp.MustCompile(`(?m)^tick-\d`)
	if tickLine.MatchString(during) {
		t.Errorf("guest output was forwarded while the host command ran (route HostProcess):\n%s", during)
	}
	if !waitHostProcess(t, "sleep 8", false, 30*time.Second) {
		t.Fatal("the host command did not end")
	}
	pane := m.waitLine("main", "tick-6", 30*time.Second)
	at := func(line string) int {
		loc := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `\s*$`).FindStringIndex(pane)
		if loc == nil {
			return -1
		}
		return loc[0]
	}
	last := -1
	for i := 1; i <= 6; i++ {
		n := at("tick-" + strconv.Itoa(i))
		if n < 0 || n < last {
			t.Errorf("held guest output lost or out of order (tick-%d):\n%s", i, pane)
		}
		last = n
	}
	if end := strings.Index(pane, "[lazaret] host command exited with status 0"); end < 0 || end > at("tick-1") {
		t.Errorf("the CLI did not report the host command's end before the held output:\n%s", pane)
	}
	// The terminal is the sandbox's again: this line reaches the guest's cat.
	m.line("main", "typed-after-host")
	m.keys("main", "C-d")
	m.waitLine("main", "all-done", 30*time.Second)
	typed, err := os.ReadFile(filepath.Join(ws, "typed"))
	if err != nil {
		t.Fatal(err)
	}
	if string(typed) != "typed-after-host\n" {
		t.Errorf("the guest read %q from its terminal, want only what was typed after the host command (%q)", typed, "typed-after-host\n")
	}
	m.line("main", "exit 5")
	m.waitLine("main", "RC-a=5", 30*time.Second)
	m.sttySame("a.before", "a.after")
	m.kill()
	noLeftovers(t)
}

// TestSpec33CloseKillsHostProcess (§3.3 close handshake, §3.7,
// NoOrphanHostProcess): a session that closes while its approved host
// command runs — its command exits, or its client disconnects — kills that
// command first: the CLI is told it was cancelled before the session's
// exit, no process of it is left when the CLI has the exit status, the
// marker it would write after a delay never appears, and the audit log
// records the request as cancelled because the session closed.
func TestSpec33CloseKillsHostProcess(t *testing.T) {
	parallel(t)
	recordModelTrace(t, "DeveloperApprove", "StartHostExecution", "CancelRequest", "DeliverResult")
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	marks := e.userDir("close-marks-" + randHex(3))
	m := newTmux(t, ws, 140, 40)

	// 1. The session's command exits while the host command runs.
	exited := filepath.Join(marks, "exited")
	m.startLazaret("main", "a", "--config "+cfg+" -p esc -- sh -c 'lazaret-escalate -- sh -c \"sleep 6.1; touch "+exited+"\" & while [ ! -e /workspace/go ]; do sleep 0.05; done'")
	m.waitFor("main", "Run on the host?", 3*time.Minute)
	m.line("main", "y")
	if !waitHostProcess(t, "sleep 6.1", true, 30*time.Second) {
		t.Fatalf("the approved host command never started:\n%s", m.capture("main"))
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pane := m.waitMatch("main", regexp.MustCompile(`RC-a=\d+`), 60*time.Second)
	if p := userProcs(t, "sleep 6.1"); len(p) != 0 {
		t.Errorf("the host command outlived its session's exit: %v", p)
	}
	cancelled := strings.Index(pane, "[lazaret] host command cancelled: the session closed while the host command ran")
	if cancelled < 0 || cancelled > regexp.MustCompile(`RC-a=\d`).FindStringIndex(pane)[0] {
		t.Errorf("the CLI was not told of the cancellation before the session's exit:\n%s", pane)
	}

	// 2. The client disconnects (~.) while the host command runs.
	discon := filepath.Join(marks, "disconnected")
	m.clearScreen("main", "Run on the host?")
	m.startLazaret("main", "b", "--config "+cfg+" -p esc -- sh -c 'lazaret-escalate -- sh -c \"sleep 6.2; touch "+discon+"\"; sleep 100'")
	m.waitFor("main", "Run on the host?", 3*time.Minute)
	m.line("main", "y")
	if !waitHostProcess(t, "sleep 6.2", true, 30*time.Second) {
		t.Fatalf("the approved host command never started:\n%s", m.capture("main"))
	}
	m.keys("main", "Enter")
	m.tmux("send-keys", "-t", "main", "-l", "~.")
	m.waitLine("main", "RC-b=129", 30*time.Second)
	if !waitHostProcess(t, "sleep 6.2", false, 10*time.Second) {
		t.Errorf("the host command outlived its disconnected session: %v", userProcs(t, "sleep 6.2"))
	}
	m.sttySame("a.before", "a.after")
	m.sttySame("b.before", "b.after")

	// Past both delays: neither marker was written.
	time.Sleep(7 * time.Second)
	for _, f := range []string{exited, discon} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("the host command ran to its end after its session closed (%s exists)", f)
		}
	}
	a := lz(t, ws, nil, "audit", "--json")
	n := 0
	for _, l := range strings.Split(a.stdout, "\n") {
		if strings.Contains(l, `"outcome":"cancelled"`) && strings.Contains(l, `"reason":"the session closed while the host command ran"`) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("audit: %d cancellations because the session closed, want 2:\n%s", n, a.stdout)
	}
	m.kill()
	noLeftovers(t)
}

// TestSpec37LargeOutputAtTerminal (§3.3, §3.7): an auto-approved host
// command typed at an interactive shell writes far more than the kernel's
// PTY buffer holds while its session's terminal is not read (route
// HostProcess). The client holds that output instead of blocking on the
// terminal, so it keeps acknowledging, the command completes with status 0
// (not stopped at the acknowledgement timeout), and all of it reaches the
// terminal afterwards.
func TestSpec37LargeOutputAtTerminal(t *testing.T) {
	parallel(t)
	e := need(t)
	cfg := escalationConfig(t)
	ws := workspace(t)
	var big strings.Builder
	for i := 0; big.Len() < 3<<20; i++ {
		fmt.Fprintf(&big, "line-%07d\n", i)
	}
	big.WriteString("last-line-of-host-output\n")
	p := filepath.Join(ws, "big.txt")
	os.WriteFile(p, []byte(big.String()), 0o644)
	os.Chown(p, e.uid, e.gid)
	m := newTmux(t, ws, 120, 40)
	m.startLazaret("main", "a", "--config "+cfg+" -p esc")
	m.waitFor("main", "/workspace #", 3*time.Minute)
	m.line("main", fmt.Sprintf("lazaret-escalate -- head -c %d big.txt; echo escalate-rc=$?", big.Len()))
	pane := m.waitLine("main", "escalate-rc=0", 3*time.Minute)
	if !strings.Contains(pane, "escalate-rc=0") || !strings.Contains(pane, "last-line-of-host-output") {
		t.Errorf("a large host output at the terminal did not complete:\n%s", pane)
	}
	m.line("main", "exit")
	m.waitLine("main", "RC-a=0", time.Minute)
	m.kill()
	noLeftovers(t)
}
