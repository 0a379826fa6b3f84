package hc

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/runsc"
)

// Shell statuses of a command that cannot run (package sandboxinit's
// launcher reports the same).
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// A non-interactive session's command is started by `runsc exec` itself,
// with no launcher process in the sandbox. When the command cannot run,
// runsc reports it on the session's stderr and exits 128; stderrGate holds
// stderr back until the launch is confirmed (runsc wrote the guest pid to
// its --internal-pid-file, which it does only after the sentry started the
// process), so that such a report can be replaced by the product's own
// message and the shell's 127/126 (launchFailure), and nothing the command
// itself writes is ever rewritten.
type stderrGate struct {
	mu       sync.Mutex
	open     bool
	closed   bool
	polling  bool
	buf      []byte
	write    func([]byte)
	launched func() bool
}

// launchedByPIDFile reports whether runsc exec wrote a guest pid to pidFile.
func launchedByPIDFile(pidFile string) func() bool {
	return func() bool {
		_, ok := runsc.ReadInternalPID(pidFile)
		return ok
	}
}

// gateHold bounds what the gate holds before the launch is confirmed: runsc's
// own report is one line; past this the bytes are the command's.
const gateHold = 64 << 10

// Write passes b on once the launch is confirmed and holds it until then.
func (g *stderrGate) Write(b []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open && (g.launched() || len(g.buf)+len(b) > gateHold) {
		g.openLocked()
	}
	if g.open {
		g.write(b)
		return
	}
	g.buf = append(g.buf, b...)
	if !g.polling {
		// The command may write before runsc records its pid: release
		// what it wrote as soon as the pid is there.
		g.polling = true
		go g.poll()
	}
}

func (g *stderrGate) openLocked() {
	g.open = true
	if len(g.buf) > 0 {
		g.write(g.buf)
		g.buf = nil
	}
}

func (g *stderrGate) poll() {
	for wait := time.Millisecond; ; {
		time.Sleep(wait)
		g.mu.Lock()
		if g.open || g.closed {
			g.mu.Unlock()
			return
		}
		if g.launched() {
			g.openLocked()
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

// Close ends the gate once the session's runsc exec exited and stderr was
// drained. It returns what it still holds when the launch was never
// confirmed (runsc's report); otherwise it passes everything on.
func (g *stderrGate) Close() (held []byte, launched bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if !g.open && g.launched() {
		g.openLocked()
	}
	if g.open {
		return nil, true
	}
	held, g.buf = g.buf, nil
	return held, false
}

// launchFailure turns runsc exec's report that argv0 could not be started
// (status 128, no guest pid) into the shell's status and the product's
// message, as the in-sandbox launcher of interactive sessions reports it
// (package sandboxinit). ok is false for any other failure, which is
// passed on unchanged.
func launchFailure(argv0 string, code int, report []byte) (status int, msg string, ok bool) {
	r := string(report)
	if code != 128 || !strings.Contains(r, "executing command") {
		return 0, "", false
	}
	switch {
	case strings.Contains(r, "error finding executable"), strings.Contains(r, "no such file or directory"):
		return exitNotFound, fmt.Sprintf("lazaret: %s: command not found in the sandbox\n", argv0), true
	case strings.Contains(r, "permission denied"):
		return exitNotExecutable, fmt.Sprintf("lazaret: %s: permission denied\n", argv0), true
	case strings.Contains(r, "exec format error"):
		return exitNotExecutable, fmt.Sprintf("lazaret: %s: exec format error\n", argv0), true
	case strings.Contains(r, "is a directory"):
		return exitNotExecutable, fmt.Sprintf("lazaret: %s: is a directory\n", argv0), true
	}
	return 0, "", false
}
