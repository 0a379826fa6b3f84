package integration

// A PTY harness: the test's own terminal (a host PTY whose master the test
// reads and writes) around a process of the test user, for byte-exact
// terminal checks and the terminal benchmark.

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/pty"
)

// ptyTestSize is the size of every harness PTY.
var ptyTestSize = pty.Size{Rows: 40, Cols: 120}

// ptyProc is a process of the test user whose stdio and controlling
// terminal is the slave of a PTY the harness reads and writes.
type ptyProc struct {
	m   *pty.Master
	cmd *exec.Cmd
}

func startOnPTY(t *testing.T, e *env, dir string, extraEnv []string, argv ...string) *ptyProc {
	t.Helper()
	return startOnPTYAs(t, e, &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}, dir, extraEnv, argv...)
}

// startOnPTYAs is startOnPTY with the given credentials (nil: the
// harness's own, root).
func startOnPTYAs(t *testing.T, e *env, cred *syscall.Credential, dir string, extraEnv []string, argv ...string) *ptyProc {
	t.Helper()
	m, slave, err := pty.Open(ptyTestSize)
	if err != nil {
		t.Fatal(err)
	}
	slave.Chown(e.uid, e.gid)
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = dir
	c.Env = append([]string{"HOME=" + e.home, "USER=" + *flagUser, "PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm",
		"XDG_STATE_HOME=" + e.stateHome, "XDG_RUNTIME_DIR=" + e.runtime, "LAZARET_RUNSC=" + e.runsc, "LANG=C.UTF-8"}, extraEnv...)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	return &ptyProc{m: m, cmd: c}
}

// until reads the master until marker has been seen; it returns the time
// the marker arrived and the number of bytes read before it.
func (p *ptyProc) until(t *testing.T, marker string, timeout time.Duration) (time.Time, int64) {
	t.Helper()
	buf := make([]byte, 64<<10)
	var tail []byte
	var n int64
	p.m.SetReadDeadline(time.Now().Add(timeout))
	for {
		k, err := p.m.Read(buf)
		if k > 0 {
			n += int64(k)
			tail = append(tail, buf[:k]...)
			if i := bytes.Index(tail, []byte(marker)); i >= 0 {
				return time.Now(), n
			}
			if len(tail) > len(marker) {
				tail = append([]byte(nil), tail[len(tail)-len(marker):]...)
			}
		}
		if err != nil {
			t.Fatalf("waiting for %q: %v (last bytes %q)", marker, err, tail)
		}
	}
}

// end hangs up the terminal (closing the master sends SIGHUP to the
// slave's session) and waits for the process.
func (p *ptyProc) end(t *testing.T) {
	p.m.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill() // the process this harness started
		<-done
		t.Errorf("%v did not end after hang-up", p.cmd.Args)
	}
}

// readUntil reads the master until marker has been seen and returns every
// byte read up to and including it (bytes after it are dropped).
func (p *ptyProc) readUntil(t *testing.T, marker string, timeout time.Duration) []byte {
	t.Helper()
	buf := make([]byte, 4096)
	var got []byte
	p.m.SetReadDeadline(time.Now().Add(timeout))
	for {
		k, err := p.m.Read(buf)
		got = append(got, buf[:k]...)
		if i := bytes.Index(got, []byte(marker)); i >= 0 {
			return got[:i+len(marker)]
		}
		if err != nil {
			t.Fatalf("waiting for %q: %v (read %q)", marker, err, got)
		}
	}
}

// TestTerminalOutputUnprocessed checks that the bytes the guest's terminal
// produces reach the user's terminal unchanged: the guest's line discipline
// applies the guest's output modes once, and the CLI's terminal is in full
// raw mode, so a cooked guest's CR LF is not turned into CR CR LF and a
// guest that turned output processing off gets its bare LF through.
func TestTerminalOutputUnprocessed(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	p := startOnPTY(t, e, ws, nil, filepath.Join(e.bin, "lazaret"), "run", "-p", "tiny", "--", "sh", "-c",
		`printf 'S-T-A-R-T\n'; printf 'cooked\n'; stty -opost; printf 'raw\nE-N-D\n'`)
	got := p.readUntil(t, "E-N-D", 2*time.Minute)
	if i := bytes.Index(got, []byte("S-T-A-R-T")); i >= 0 {
		got = got[i+len("S-T-A-R-T"):]
	}
	if want := "\r\ncooked\r\nraw\nE-N-D"; string(got) != want {
		t.Errorf("the outer terminal received %q, want %q (output processed a second time?)", got, want)
	}
	p.end(t)
	noLeftovers(t)
}
