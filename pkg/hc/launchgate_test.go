package hc

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The reports are runsc exec's own (the pinned runsc, a running sandbox).
func TestLaunchFailure(t *testing.T) {
	for _, c := range []struct {
		argv0, report string
		code, want    int
		msg           string
	}{
		{"nosuchcmd", `executing processes for container: executing command "nosuchcmd" in sandbox: error finding executable "nosuchcmd" in PATH [/usr/bin /bin]: no such file or directory`, 128, 127, "lazaret: nosuchcmd: command not found in the sandbox\n"},
		{"/nonexistent", `executing processes for container: executing command "/nonexistent" in sandbox: failed to load /nonexistent: no such file or directory`, 128, 127, "lazaret: /nonexistent: command not found in the sandbox\n"},
		{"/etc/passwd", `executing processes for container: executing command "/etc/passwd" in sandbox: failed to load /etc/passwd: permission denied`, 128, 126, "lazaret: /etc/passwd: permission denied\n"},
		{"./blob", `executing processes for container: executing command "./blob" in sandbox: failed to load ./blob: exec format error`, 128, 126, "lazaret: ./blob: exec format error\n"},
	} {
		got, msg, ok := launchFailure(c.argv0, c.code, []byte(c.report+"\n"))
		if !ok || got != c.want || msg != c.msg {
			t.Errorf("%s: (%d, %q, %v), want (%d, %q)", c.argv0, got, msg, ok, c.want, c.msg)
		}
	}
	// Anything else is passed on unchanged.
	for _, c := range []struct {
		code   int
		report string
	}{
		{128, "some other runsc failure: container not running"},
		{1, `executing command "x" in sandbox: failed to load x: no such file or directory`},
	} {
		if _, _, ok := launchFailure("x", c.code, []byte(c.report)); ok {
			t.Errorf("%d %q classified as a launch failure", c.code, c.report)
		}
	}
}

type collect struct {
	mu  sync.Mutex
	out []byte
}

func (c *collect) write(b []byte) { c.mu.Lock(); c.out = append(c.out, b...); c.mu.Unlock() }
func (c *collect) get() string    { c.mu.Lock(); defer c.mu.Unlock(); return string(c.out) }

// TestStderrGate: stderr is held until the pid file names the guest
// process, then passed on in order; what the command writes is never held
// back for good, and a launch never confirmed returns runsc's report.
func TestStderrGate(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out collect
	g := &stderrGate{write: out.write, launched: launchedByPIDFile(pidFile)}
	g.Write([]byte("early "))
	if out.get() != "" {
		t.Fatal("stderr passed before the launch was confirmed")
	}
	if err := os.WriteFile(pidFile, []byte("42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for out.get() != "early " && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if out.get() != "early " {
		t.Fatalf("held stderr not released once the pid was written: %q", out.get())
	}
	g.Write([]byte("late"))
	if held, launched := g.Close(); !launched || held != nil || out.get() != "early late" {
		t.Fatalf("Close: %q %v, out %q", held, launched, out.get())
	}

	// Never launched: Close hands back the report, nothing was written.
	var out2 collect
	g = &stderrGate{write: out2.write, launched: launchedByPIDFile(filepath.Join(t.TempDir(), "none"))}
	g.Write([]byte("runsc: failed to load x\n"))
	if held, launched := g.Close(); launched || string(held) != "runsc: failed to load x\n" || out2.get() != "" {
		t.Fatalf("Close of an unlaunched gate: %q %v, out %q", held, launched, out2.get())
	}

	// More than the gate holds is the command's: passed on.
	var out3 collect
	g = &stderrGate{write: out3.write, launched: func() bool { return false }}
	big := strings.Repeat("x", gateHold+1)
	g.Write([]byte(big))
	if out3.get() != big {
		t.Fatalf("%d bytes passed of %d over the hold bound", len(out3.get()), len(big))
	}
	g.Close()
}
