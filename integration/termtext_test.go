package integration

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/pty"
)

// onTerminal runs `lazaret ARGS` in ws with stdout and stderr on a
// terminal (a PTY whose other end the test reads) and returns what reached
// the terminal and the exit status.
func onTerminal(t *testing.T, e *env, ws string, args ...string) (string, int) {
	t.Helper()
	m, slave, err := pty.Open(pty.Size{Rows: 50, Cols: 250})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	slave.Chown(e.uid, e.gid)
	c := e.cmd(ws, nil, args...)
	c.Stdout, c.Stderr = slave, slave
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // the terminal ends (EIO) when the command's copies close
	var term bytes.Buffer
	buf := make([]byte, 4096)
	for {
		m.SetReadDeadline(time.Now().Add(2 * time.Minute))
		n, err := m.Read(buf)
		term.Write(buf[:n])
		if err != nil {
			break
		}
	}
	c.Wait()
	return term.String(), c.ProcessState.ExitCode()
}

// TestDX5SandboxTextCannotDriveTheTerminal: names the agent chooses reach
// the developer's terminal through Lazaret's own output — a file in a State
// Anchor (`state inspect`), an ignored file (`state ignored list`, and the
// sticky-path note of the next `lazaret run`), a path the Git Sentry
// refused (`lazaret logs`). An escape sequence in them (here: set the
// window title, clear the screen) arrives escaped, never as control
// characters, also in a pipe; --json keeps it exact.
func TestDX5SandboxTextCannotDriveTheTerminal(t *testing.T) {
	parallel(t)
	e := need(t)
	ws, git := repoWithSubmodule(t, e)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "*.log\n")
	git("add", ".gitignore")
	git("commit", "-qm", "ignore logs")
	const shown = `x\x1b]0;PWNED\a\x1b[2J`
	script := `n=$(printf 'x\033]0;PWNED\007\033[2J')
touch "/usr/$n" "/workspace/$n.log"
mkdir "/workspace/.git/modules/lib/$n" && touch "/workspace/.git/modules/lib/$n/config" 2>/dev/null
: > /workspace/.gitignore; echo done`
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", script); r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("run: %+v", r)
	}
	for _, c := range []struct {
		args []string
		want string // the escaped name, as it must appear
	}{
		{[]string{"state", "inspect", "-p", "tiny", "/usr"}, "/usr/" + shown},
		{[]string{"state", "ignored", "list", "-p", "tiny"}, shown + ".log"},
		{[]string{"logs", "-p", "tiny"}, `path=".git/modules/lib/` + shown + `/config"`},
		{[]string{"run", "-p", "tiny", "--", "true"}, "note: " + shown + ".log"},
	} {
		out, code := onTerminal(t, e, ws, c.args...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("lazaret %s on a terminal: exit %d, want %q in:\n%q", strings.Join(c.args, " "), code, c.want, out)
		}
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("lazaret %s wrote control characters to the terminal: %q", strings.Join(c.args, " "), out)
		}
	}
	// The text formats escape it in a pipe too (`lazaret logs | grep` prints
	// what it finds on the terminal); --json keeps it exact, for programs.
	if r := lz(t, ws, nil, "logs", "-p", "tiny"); r.code != 0 || !strings.Contains(r.stdout, shown) || strings.ContainsAny(r.stdout, "\x1b\x07") {
		t.Errorf("lazaret logs to a pipe: %+v", r)
	}
	r := lz(t, ws, nil, "state", "inspect", "-p", "tiny", "--json", "/usr")
	if r.code != 0 || !strings.Contains(r.stdout, `x\u001b]0;PWNED\u0007\u001b[2J`) {
		t.Errorf("state inspect --json: %+v", r)
	}
	noLeftovers(t)
}

// TestDX5SandboxCannotForgeTheDomainLog: runsc's standard streams are the
// sandbox init's, which a guest root process can write through
// /proc/1/fd/1 and /proc/1/fd/2. What it writes reaches `lazaret logs` only
// as the value of a record of the Runtime Supervisor saying where it came
// from — never as a record of its own (here: one claiming the coordinator
// approved an escalation) — and a flood is cut after 100 lines a stream.
func TestDX5SandboxCannotForgeTheDomainLog(t *testing.T) {
	parallel(t)
	need(t)
	ws := workspace(t)
	forged := `time=2026-12-07T05:31:00.000Z level=ERROR msg="escalation approved by developer" role=hc argv=rm`
	script := `printf '%s\n' '` + forged + `' > /proc/1/fd/2
i=0; while [ $i -lt 1000 ]; do echo "flood $i" > /proc/1/fd/1; i=$((i+1)); done; echo done`
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", script); r.code != 0 || r.stdout != "done\n" {
		t.Fatalf("run: %+v", r)
	}
	r := lz(t, ws, nil, "logs", "-p", "tiny", "--json")
	if r.code != 0 {
		t.Fatalf("logs: %+v", r)
	}
	var fromSandbox, flood int
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec struct {
			Role  string `json:"role"`
			Msg   string `json:"msg"`
			Attrs []struct{ Key, Value string }
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("logs --json line %q: %v", l, err)
		}
		if strings.Contains(rec.Msg, "escalation approved by developer") {
			t.Errorf("the sandbox forged a record of the Domain log: %s", l)
		}
		for _, a := range rec.Attrs {
			switch {
			case a.Value == forged && rec.Role == "rs" && strings.HasPrefix(rec.Msg, "sandbox stderr after readiness"):
				fromSandbox++
			case strings.HasPrefix(a.Value, "flood "):
				flood++
			}
		}
	}
	if fromSandbox != 1 {
		t.Errorf("the sandbox's line is not logged once as a value of a Runtime Supervisor record (%d):\n%s", fromSandbox, r.stdout)
	}
	if flood > 100 {
		t.Errorf("%d lines of the flood logged, want at most 100", flood)
	}
	noLeftovers(t)
}
