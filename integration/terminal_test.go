package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tmuxTerm is a real terminal: a private tmux server of the test user (its
// own socket), whose pane runs an outer bash in which lazaret is typed.
type tmuxTerm struct {
	t    *testing.T
	e    *env
	sock string
	dir  string // a directory of the test user for stty snapshots
}

// newTmux starts a tmux server with one session "main" (w×h) running an
// outer bash in ws.
func newTmux(t *testing.T, ws string, w, h int) *tmuxTerm {
	t.Helper()
	e := need(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is required for the terminal tests: run `make setup` (%v)", err)
	}
	m := &tmuxTerm{t: t, e: e, sock: "lz-" + randHex(4), dir: e.userDir("tty-" + randHex(3))}
	t.Cleanup(m.kill)
	m.newSession("main", ws, w, h)
	return m
}

func (m *tmuxTerm) newSession(name, ws string, w, h int) {
	m.t.Helper()
	outer := strings.Join([]string{"env", "-i", "HOME=" + m.e.home, "USER=" + *flagUser, "PATH=" + m.e.bin + ":/usr/local/bin:/usr/bin:/bin",
		"XDG_STATE_HOME=" + m.e.stateHome, "XDG_RUNTIME_DIR=" + m.e.runtime, "LAZARET_RUNSC=" + m.e.runsc, "LANG=C.UTF-8", "TERM=xterm-256color",
		"PS1='OUTER$ '", "bash", "--norc", "--noprofile"}, " ")
	if tr := modelTraceEnv(ws); len(tr) > 0 {
		outer = strings.Replace(outer, "env -i ", "env -i "+tr[0]+" ", 1)
	}
	m.tmux("new-session", "-d", "-s", name, "-x", itoa(w), "-y", itoa(h), "-c", ws, outer)
	m.waitFor(name, "OUTER$", 10*time.Second)
}

func itoa(n int) string { return strconv.Itoa(n) }

// tmux runs a tmux command on this server as the test user.
func (m *tmuxTerm) tmux(args ...string) string {
	m.t.Helper()
	c := exec.Command("runuser", append([]string{"-u", *flagUser, "--", "env", "-i", "HOME=" + m.e.home, "PATH=/usr/bin:/bin", "tmux", "-L", m.sock, "-f", "/dev/null"}, args...)...)
	out, err := c.CombinedOutput()
	if err != nil {
		m.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// keys sends tmux key names (literal text is sent with -l).
func (m *tmuxTerm) keys(target string, keys ...string) {
	m.tmux(append([]string{"send-keys", "-t", target}, keys...)...)
}

// line types text and Enter.
func (m *tmuxTerm) line(target, text string) {
	m.tmux("send-keys", "-t", target, "-l", text)
	m.tmux("send-keys", "-t", target, "Enter")
}

// clearScreen clears target's screen with Ctrl-L, which the program on
// the terminal handles when it gets to it (through the sandbox, for a
// session), and waits until stale, what the next wait looks for, is gone
// from the pane: that wait then matches new output only, never what the
// last step left on the screen.
func (m *tmuxTerm) clearScreen(target, stale string) {
	m.t.Helper()
	m.keys(target, "C-l")
	if !waitUntil(10*time.Second, 50*time.Millisecond, func() bool { return !strings.Contains(m.capture(target), stale) }) {
		m.t.Fatalf("pane %s: Ctrl-L did not clear %q from the screen within 10s; pane:\n%s", target, stale, m.capture(target))
	}
}

func (m *tmuxTerm) capture(target string) string { return m.tmux("capture-pane", "-p", "-t", target) }

// waitFor polls the pane until it contains want; it returns the pane.
func (m *tmuxTerm) waitFor(target, want string, timeout time.Duration) string {
	m.t.Helper()
	return m.waitMatch(target, regexp.MustCompile(regexp.QuoteMeta(want)), timeout)
}

// waitLine waits for a pane line that is exactly want (so typed commands,
// which contain the expression rather than its value, never match).
func (m *tmuxTerm) waitLine(target, want string, timeout time.Duration) string {
	m.t.Helper()
	return m.waitMatch(target, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(want)+`\s*$`), timeout)
}

// waitSize types stty size until the terminal reports size want ("rows
// cols"): a resize reaches the foreground job asynchronously.
func (m *tmuxTerm) waitSize(target, want string, timeout time.Duration) {
	m.t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `\s*$`)
	if !waitUntil(timeout, 300*time.Millisecond, func() bool {
		m.line(target, "stty size")
		return waitUntil(200*time.Millisecond, 50*time.Millisecond, func() bool { return re.MatchString(m.capture(target)) })
	}) {
		m.t.Fatalf("pane %s: the terminal size never became %s; pane:\n%s", target, want, m.capture(target))
	}
}

func (m *tmuxTerm) waitMatch(target string, re *regexp.Regexp, timeout time.Duration) string {
	m.t.Helper()
	var pane string
	if waitUntil(timeout, 100*time.Millisecond, func() bool { pane = m.capture(target); return re.MatchString(pane) }) {
		return pane
	}
	m.t.Fatalf("pane %s: no %q within %s; pane:\n%s", target, re.String(), timeout, pane)
	return ""
}

// kill stops this tmux server (only the one this test started, by socket).
func (m *tmuxTerm) kill() {
	exec.Command("runuser", "-u", *flagUser, "--", "env", "-i", "HOME="+m.e.home, "PATH=/usr/bin:/bin", "tmux", "-L", m.sock, "kill-server").Run()
	// The server exits asynchronously; wait until its socket is gone.
	waitUntil(2500*time.Millisecond, 50*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Join("/tmp", "tmux-"+itoa(m.e.uid), m.sock))
		return err != nil
	})
}

// sttySame asserts the outer terminal's modes are identical before and
// after (files written by the outer shell).
func (m *tmuxTerm) sttySame(before, after string) {
	m.t.Helper()
	b, err1 := os.ReadFile(filepath.Join(m.dir, before))
	// The outer shell writes the after snapshot just after printing the
	// exit status the caller waited for: wait for it to be complete.
	var a []byte
	var err2 error
	waitUntil(5*time.Second, 50*time.Millisecond, func() bool {
		a, err2 = os.ReadFile(filepath.Join(m.dir, after))
		return err2 == nil && len(a) > 0 && a[len(a)-1] == '\n'
	})
	if err1 != nil || err2 != nil || len(b) == 0 {
		m.t.Fatalf("stty snapshots: %v %v", err1, err2)
	}
	if string(a) != string(b) {
		m.t.Errorf("outer terminal modes changed:\nbefore %s\nafter  %s", b, a)
	}
}

// startTinyShell starts, in target, an interactive `lazaret run -p tiny`
// tagged tag (startLazaret) and waits until its shell answers.
func (m *tmuxTerm) startTinyShell(target, tag string) {
	m.t.Helper()
	m.startLazaret(target, tag, "-p tiny")
	m.line(target, "echo "+tag+"-$((6*7))")
	m.waitLine(target, tag+"-42", 3*time.Minute)
}

// endedWith waits for the lazaret invocation tag of target (startLazaret)
// to end, and asserts its exit status is code, the pane shows want, and the
// outer shell is back with its terminal modes unchanged.
func (m *tmuxTerm) endedWith(target, tag string, code int, want string, timeout time.Duration) {
	m.t.Helper()
	pane := m.waitMatch(target, regexp.MustCompile(`RC-`+tag+`=\d+`), timeout)
	if !strings.Contains(pane, fmt.Sprintf("RC-%s=%d", tag, code)) || !strings.Contains(pane, want) {
		m.t.Errorf("lazaret run %s: want status %d and %q in the pane:\n%s", tag, code, want, pane)
	}
	m.waitFor(target, "OUTER$", 10*time.Second)
	m.sttySame(tag+".before", tag+".after")
}

// startLazaret types, in the outer shell of target, a lazaret invocation
// framed by stty snapshots and the exit status.
func (m *tmuxTerm) startLazaret(target, tag, args string) {
	m.line(target, "stty -g > "+m.dir+"/"+tag+".before; lazaret run "+args+"; echo RC-"+tag+"=$?; stty -g > "+m.dir+"/"+tag+".after")
}

// TestTerminalInteractiveShell (§3.3, FR-8, FR-14, DX-5): `lazaret run` with no
// command on a terminal is a login shell of the default image; arithmetic,
// resize, Ctrl-C (single and a burst), Ctrl-Z/fg job control, full-screen
// less and top behave as on a host terminal; `exit 7` returns 7; the outer
// terminal's modes are identical afterwards.
func TestTerminalInteractiveShell(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	m := newTmux(t, ws, 120, 40)
	const p = "main"
	m.startLazaret(p, "s", "")
	m.waitFor(p, "root@", 3*time.Minute)
	m.line(p, "echo $((6*7))")
	m.waitLine(p, "42", 10*time.Second)
	m.line(p, "stty size")
	m.waitLine(p, "40 120", 10*time.Second)

	m.tmux("resize-window", "-t", p, "-x", "100", "-y", "30")
	m.waitSize(p, "30 100", 10*time.Second)

	// Ctrl-C interrupts the foreground job, not the shell.
	m.line(p, "sh -c 'echo fg-up-$((3*11)); exec sleep 100'")
	m.waitLine(p, "fg-up-33", 10*time.Second)
	start := time.Now()
	m.keys(p, "C-c")
	m.line(p, "echo alive-$((1+1))")
	m.waitLine(p, "alive-2", 10*time.Second)
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Ctrl-C took %s", d)
	}
	// A burst of Ctrl-C at the prompt leaves the shell usable. Bash's
	// readline drops what it already read of a line when it handles the
	// interrupt, so a character typed while the burst is still being
	// handled can be lost, as on any terminal ("cho: command not found"):
	// the command is typed again until the shell has settled, as a user
	// would.
	m.keys(p, "C-c", "C-c", "C-c", "C-c", "C-c", "C-c", "C-c", "C-c", "C-c", "C-c")
	burst := regexp.MustCompile(`(?m)^burst-3\s*$`)
	if !waitUntil(10*time.Second, 500*time.Millisecond, func() bool {
		m.line(p, "echo burst-$((2+1))")
		return waitUntil(2*time.Second, 50*time.Millisecond, func() bool { return burst.MatchString(m.capture(p)) })
	}) {
		t.Fatalf("the shell is not usable after a burst of Ctrl-C; pane:\n%s", m.capture(p))
	}

	// Job control: Ctrl-Z stops the job, fg resumes it, Ctrl-C ends it.
	m.tmux("clear-history", "-t", p)
	m.keys(p, "C-l")
	// The job says when it runs and when it is continued.
	m.line(p, `sh -c 'trap "echo cont-\$((3*3))" CONT; echo job-up-$((4*11)); while :; do sleep 0.2; done'`)
	m.waitLine(p, "job-up-44", 10*time.Second)
	m.keys(p, "C-z")
	m.waitFor(p, "Stopped", 10*time.Second)
	m.line(p, "jobs; echo jobs-$((2+2))")
	m.waitLine(p, "jobs-4", 10*time.Second)
	m.line(p, "fg")
	m.waitLine(p, "cont-9", 10*time.Second)
	m.keys(p, "C-c")
	m.line(p, "echo fg-$((3+2)) $(jobs | wc -l)")
	m.waitLine(p, "fg-5 0", 10*time.Second)

	// Full-screen programs draw and quit cleanly.
	m.keys(p, "C-l")
	m.line(p, "seq 1 5000 > /tmp/long; less /tmp/long")
	pane := m.waitMatch(p, regexp.MustCompile(`(?s)^1\n2\n3\n.*\n29\n`), 15*time.Second)
	if strings.Contains(pane, "root@") {
		t.Errorf("less did not take the whole screen:\n%s", pane)
	}
	m.keys(p, "G")
	m.waitLine(p, "5000", 10*time.Second)
	m.keys(p, "q")
	m.line(p, "echo less-$((3+3))")
	m.waitLine(p, "less-6", 10*time.Second)

	m.keys(p, "C-l")
	m.line(p, "top -d 1")
	m.waitFor(p, "load average", 15*time.Second)
	m.keys(p, "q")
	// top restores the terminal with TCSAFLUSH, discarding what was typed
	// before it exited: type the next command at the shell's new prompt.
	m.waitMatch(p, regexp.MustCompile(`(?m)^root@[^\n]*#\s*$`), 10*time.Second)
	m.line(p, "echo top-$((4+4))")
	m.waitLine(p, "top-8", 10*time.Second)

	m.line(p, "exit 7")
	m.waitLine(p, "RC-s=7", 30*time.Second)
	m.waitFor(p, "OUTER$", 10*time.Second)
	m.sttySame("s.before", "s.after")
	m.kill()
	noLeftovers(t)
	allClean(t, ws, "default") // the Session Terminal and sandbox records reached Clean
}

// TestTerminalConcurrentSessions (§3.3, FR-14): two interactive sessions of one
// Domain, each in its own terminal, never see each other's bytes.
func TestTerminalConcurrentSessions(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	m := newTmux(t, ws, 100, 30)
	m.newSession("other", ws, 100, 30)
	m.startLazaret("main", "a", "-p tiny")
	m.line("main", "echo ready-$((2*3))")
	started := m.waitLine("main", "ready-6", 3*time.Minute)
	m.startLazaret("other", "b", "-p tiny")
	m.line("other", "echo ready-$((3*3))")
	joined := m.waitLine("other", "ready-9", time.Minute)
	// The start's progress is shown to the session that waited for it,
	// not to one that joined the running Domain.
	if !strings.Contains(started, "lazaret: prepare:") || strings.Contains(joined, "lazaret: prepare:") {
		t.Errorf("start-up progress: want it on the starting terminal only\n--- main\n%s\n--- other\n%s", started, joined)
	}
	if n := countProcesses(t, "lazaret-hc"); n != 1 {
		t.Errorf("%d coordinators for one Domain", n)
	}
	m.line("main", "for i in 1 2 3 4 5; do echo AAA-$i; done")
	m.line("other", "for i in 1 2 3 4 5; do echo BBB-$i; done")
	a := m.waitLine("main", "AAA-5", 10*time.Second)
	b := m.waitLine("other", "BBB-5", 10*time.Second)
	if strings.Contains(a, "BBB-") || strings.Contains(b, "AAA-") {
		t.Errorf("sessions saw each other's bytes:\n--- main\n%s\n--- other\n%s", a, b)
	}
	m.line("other", "exit 4")
	m.waitLine("other", "RC-b=4", 30*time.Second)
	m.line("main", "echo still-$((5+5))")
	m.waitLine("main", "still-10", 10*time.Second)
	m.line("main", "exit")
	m.waitLine("main", "RC-a=0", 30*time.Second)
	m.waitFor("main", "OUTER$", 10*time.Second)
	m.sttySame("a.before", "a.after")
	m.sttySame("b.before", "b.after")
	m.kill()
	noLeftovers(t)
}

// TestTerminalSignalsToCLI (§3.3, FR-15, DX-5): SIGINT sent to the CLI becomes the
// Interrupt event for the session's process group; SIGTSTP suspends the CLI
// locally (terminal restored while stopped, raw again after fg, size
// resent); SIGTERM ends the CLI with 143 and a restored terminal; stdin that
// is not a terminal keeps the non-interactive path.
func TestTerminalSignalsToCLI(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	m := newTmux(t, ws, 100, 30)
	const p = "main"

	// Interrupt: the group of `sh -c` (sh and its sleep) gets SIGINT.
	m.startLazaret(p, "i", "-p tiny -- sh -c 'echo up-$((7*7)); sleep 100'")
	m.waitLine(p, "up-49", 3*time.Minute)
	signalCLI(t, syscall.SIGINT)
	m.waitLine(p, "RC-i=130", 20*time.Second)
	m.waitFor(p, "OUTER$", 10*time.Second)
	m.sttySame("i.before", "i.after")

	// Local suspension and resume.
	m.keys(p, "C-l")
	// Typed alone: a list would go on past the stopped job.
	m.line(p, "stty -g > "+m.dir+"/z.before")
	m.line(p, "lazaret run -p tiny")
	m.line(p, "echo in-$((8*8))")
	m.waitLine(p, "in-64", 3*time.Minute)
	signalCLI(t, syscall.SIGTSTP)
	m.waitFor(p, "Stopped", 10*time.Second)
	m.line(p, "stty -g > "+m.dir+"/z.mid; echo mid-$((9*9))")
	m.waitLine(p, "mid-81", 10*time.Second)
	m.sttySame("z.before", "z.mid")
	m.tmux("resize-window", "-t", p, "-x", "90", "-y", "25")
	m.line(p, "fg")
	m.line(p, "echo back-$((6*6))")
	m.waitLine(p, "back-36", 15*time.Second)
	m.waitSize(p, "25 90", 5*time.Second)
	m.line(p, "exit 3")
	m.waitFor(p, "OUTER$", 30*time.Second)
	m.line(p, "echo RC-z=$?; stty -g > "+m.dir+"/z.after")
	m.waitLine(p, "RC-z=3", 10*time.Second)
	m.sttySame("z.before", "z.after")

	// SIGTERM: the CLI leaves; the coordinator releases the session.
	m.keys(p, "C-l")
	m.startLazaret(p, "t", "-p tiny")
	m.line(p, "echo t-$((4*4))")
	m.waitLine(p, "t-16", 3*time.Minute)
	signalCLI(t, syscall.SIGTERM)
	m.waitLine(p, "RC-t=143", 30*time.Second)
	m.waitFor(p, "OUTER$", 10*time.Second)
	m.sttySame("t.before", "t.after")
	noProcessesOrMountsExcept(t, "tmux", "bash")

	// stdin not a terminal: separate pipes, no terminal inside.
	m.keys(p, "C-l")
	m.line(p, "echo piped | lazaret run -p tiny -- sh -c 'cat; [ -t 1 ] && echo T1 || echo NOT-T1; exit 5'; echo RC-p=$?")
	m.waitLine(p, "RC-p=5", 3*time.Minute)
	pane := m.capture(p)
	if !strings.Contains(pane, "\npiped\n") || !strings.Contains(pane, "NOT-T1") {
		t.Errorf("non-interactive run inside a terminal:\n%s", pane)
	}
	m.kill()
	noLeftovers(t)
}

// TestTerminalProcessKilled (DX-5, FR-15, §3.3 hard loss): SIGKILL of the Host
// Coordinator, the Runtime Supervisor or the session's runsc exec client
// mid-session ends the CLI with a failure status and the outer terminal
// exactly as it was; nothing is left behind.
func TestTerminalProcessKilled(t *testing.T) {
	parallel(t)
	for _, victim := range []string{"lazaret-hc", "lazaret-rs", "runsc-exec"} {
		t.Run(victim, func(t *testing.T) {
			t.Parallel()
			ws := workspace(t)
			m := newTmux(t, ws, 100, 30)
			const p = "main"
			m.startLazaret(p, "k", "-p tiny")
			m.line(p, "echo k-$((5*5))")
			m.waitLine(p, "k-25", 3*time.Minute)
			var pid int
			if victim == "runsc-exec" {
				pid = findExecClient(t)
			} else {
				pid = findProcess(t, victim)
			}
			syscall.Kill(pid, syscall.SIGKILL) // a process this test started, by pid
			pane := m.waitMatch(p, regexp.MustCompile(`RC-k=(\d+)`), 30*time.Second)
			if strings.Contains(pane, "RC-k=0") {
				t.Errorf("CLI exited 0 after %s loss:\n%s", victim, pane)
			}
			m.waitFor(p, "OUTER$", 10*time.Second)
			m.sttySame("k.before", "k.after")
			m.kill()
			noProcessesOrMounts(t)
			// The next run of the same Domain recovers the dead generation,
			// its interactive Session Terminal included.
			if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "again"); r.code != 0 || r.stdout != "again\n" {
				t.Errorf("next run after %s loss: %+v", victim, r)
			}
			noLeftovers(t)
			allClean(t, ws, "tiny")
		})
	}
}

// findExecClient finds the scenario's own session `runsc exec` client.
func findExecClient(t *testing.T) int {
	t.Helper()
	e := need(t)
	for _, up := range ownProcs(e, t) {
		if up.uid == e.uid && strings.Contains(up.cmdline, " exec --process ") {
			return up.pid
		}
	}
	t.Fatalf("no runsc exec client of uid %d in the scenario", e.uid)
	return 0
}

// signalCLI sends sig to the scenario's lazaret CLI (started by this test
// through its tmux pane), by pid.
func signalCLI(t *testing.T, sig syscall.Signal) {
	t.Helper()
	pid := findProcess(t, "lazaret")
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
}

// countProcesses counts the scenario's own processes of the test user
// named name, not counting hidden roles.
func countProcesses(t *testing.T, name string) int {
	t.Helper()
	e := need(t)
	n := 0
	for _, up := range ownProcs(e, t) {
		if _, ok := hiddenRole(up.args); ok {
			continue // a hidden role (lazaret-hc's Git-routing daemon), not the named process itself
		}
		if up.uid == e.uid && len(up.args) > 0 && filepath.Base(up.args[0]) == name {
			n++
		}
	}
	return n
}

// noProcessesOrMountsExcept waits until no process of the product is left
// (ignoring the named processes of the test's own terminal) and no mount.
func noProcessesOrMountsExcept(t *testing.T, names ...string) {
	t.Helper()
	e := need(t)
	var last string
	if waitUntil(10*time.Second, 100*time.Millisecond, func() bool {
		last = ""
		for _, l := range strings.Split(leftoversOf(e, t), "\n") {
			if !strings.HasPrefix(l, "process ") && !strings.HasPrefix(l, "mount: ") {
				continue
			}
			skip := false
			for _, n := range names {
				if f := strings.SplitN(l, ": ", 2); len(f) == 2 && strings.HasPrefix(f[1], n) {
					skip = true
				}
			}
			if !skip {
				last += l + "\n"
			}
		}
		return last == ""
	}) {
		return
	}
	t.Errorf("processes or mounts left:\n%s", last)
}

// jobScript is a non-interactive guest command whose process group ticks a
// counter in the workspace: the leader sh waits for a subshell (same group)
// that does the ticking, so stopping only the leader would not stop the
// counter, and the group always has at least two members.
const jobScript = `echo $$ > /workspace/job.pgid; (i=0; while :; do i=$((i+1)); echo $i > /workspace/job.tick; sleep 0.2; done); echo ended`

// jobTick reads the guest's counter.
func jobTick(t *testing.T, ws string) int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(ws, "job.tick"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// waitTicking waits until the counter advances (the group runs).
func waitTicking(t *testing.T, ws string, timeout time.Duration) {
	t.Helper()
	start := jobTick(t, ws)
	if waitUntil(timeout, 100*time.Millisecond, func() bool { return jobTick(t, ws) > start }) {
		return
	}
	t.Fatalf("the guest group does not run: counter stuck at %d", start)
}

// assertGroupStopped checks from inside the sandbox (a second session of
// the same Domain reading the guest's /proc) that every process of the
// job's group — at least the leader sh and its ticking subshell — is stopped
// (a member that already exited, a zombie, does not count), and that the
// counter no longer advances.
func assertGroupStopped(t *testing.T, ws string) {
	t.Helper()
	pgid := ""
	var states string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(ws, "job.pgid"))
		pgid = strings.TrimSpace(string(b))
		r := lz(t, ws, nil, "run", "-p", "tiny", "-T", "--", "sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null")
		states = ""
		members, stopped := 0, 0
		for _, l := range strings.Split(r.stdout, "\n") {
			i := strings.LastIndexByte(l, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(l[i+1:])
			if len(f) > 2 && f[2] == pgid {
				states += l[:i+1] + " " + f[0] + "; "
				if f[0] == "Z" {
					// Exited as the stop came (a `sleep 0.2` of the ticking
					// loop); its stopped parent cannot reap it. It runs no more.
					continue
				}
				members++
				if f[0] == "T" {
					stopped++
				}
			}
		}
		if members >= 2 && stopped == members {
			before := jobTick(t, ws)
			time.Sleep(time.Second)
			if after := jobTick(t, ws); after != before {
				t.Fatalf("group %s reported stopped but the counter went %d → %d", pgid, before, after)
			}
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("guest group %s not stopped (Suspend not delivered to the group): %s", pgid, states)
}

// TestNonInteractiveJobControl (§3.3, FR-15): without a terminal
// session the Interrupt, Quit and Suspend events are what the CLI sends
// when it receives SIGINT, SIGQUIT or SIGTSTP. Ctrl-Z typed in the outer
// shell (or SIGTSTP from another process) stops the guest process group
// and the CLI; fg (SIGCONT) continues both; Ctrl-C interrupts the group.
func TestNonInteractiveJobControl(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	m := newTmux(t, ws, 100, 30)
	const p = "main"
	e := m.e

	// In a real terminal: Ctrl-Z, fg, Ctrl-C.
	// Typed alone: a list would go on past the stopped job.
	m.line(p, "lazaret run -T -p tiny -- sh -c '"+jobScript+"'")
	waitTicking(t, ws, 3*time.Minute)
	m.keys(p, "C-z")
	m.waitFor(p, "Stopped", 10*time.Second)
	assertGroupStopped(t, ws)
	m.line(p, "fg")
	waitTicking(t, ws, 15*time.Second)
	m.keys(p, "C-c")
	m.waitFor(p, "^COUTER$", 30*time.Second)
	m.line(p, "echo RC-j=$?")
	m.waitLine(p, "RC-j=130", 10*time.Second)

	// From another process: SIGTSTP, then SIGCONT, then SIGQUIT (which
	// the guest's leader traps: busybox sh ignores a plain SIGQUIT).
	os.Remove(filepath.Join(ws, "job.tick"))
	c := e.cmd(ws, nil, "run", "-T", "-p", "tiny", "--", "sh", "-c", `trap 'echo quit > /workspace/job.quit; exit 3' QUIT; `+jobScript)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitTicking(t, ws, 3*time.Minute)
	c.Process.Signal(syscall.SIGTSTP) // the CLI this test started
	assertGroupStopped(t, ws)
	c.Process.Signal(syscall.SIGCONT)
	waitTicking(t, ws, 15*time.Second)
	c.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.Process.Kill() // the CLI this test started
		<-done
		t.Fatalf("SIGQUIT to the CLI did not reach the guest group (no Quit event)")
	}
	if q, _ := os.ReadFile(filepath.Join(ws, "job.quit")); c.ProcessState.ExitCode() != 3 || string(q) != "quit\n" {
		t.Errorf("after SIGQUIT: exit %d (want 3, the trap's), trap wrote %q", c.ProcessState.ExitCode(), q)
	}
	m.kill()
	noLeftovers(t)
}
