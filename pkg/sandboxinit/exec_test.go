package sandboxinit

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/ocispec"
)

// TestMain runs the session launcher (ExecMain) when a test re-executes
// this binary with execMainEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(execMainEnv) == "1" {
		os.Exit(ExecMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

const execMainEnv = "LAZARET_TEST_EXEC_MAIN"

// launcher is this test binary as the session launcher with args.
func launcher(t *testing.T, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(exe, args...)
	c.Env = []string{execMainEnv + "=1", "PATH=/usr/bin:/bin"}
	return c
}

// TestLaunchEnv: the launcher drops every GOMAXPROCS entry (its own) and
// keeps the rest in order.
func TestLaunchEnv(t *testing.T) {
	in := []string{"PATH=/bin", "GOMAXPROCS=1", "GOMAXPROCS_X=2", "HOME=/root"}
	got := launchEnv(in)
	if want := []string{"PATH=/bin", "GOMAXPROCS_X=2", "HOME=/root"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("launchEnv = %q, want %q", got, want)
	}
	if in[1] != "GOMAXPROCS=1" {
		t.Fatalf("launchEnv changed its input: %q", in)
	}
}

// TestLauncherReportsIdentity: with ocispec.IdentityArg the launcher
// writes its own stat line on ocispec.IdentityFD before it execs the
// command in place (same pid), and the command does not inherit the
// descriptor.
func TestLauncherReportsIdentity(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := launcher(t, ocispec.LaunchEnvArg, ocispec.IdentityArg, "--", "sh", "-c", `if [ -e /proc/$$/fd/3 ]; then echo leaked; fi; echo $$`)
	c.ExtraFiles = []*os.File{w} // descriptor 3
	var out bytes.Buffer
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	report := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		report <- b
	}()
	if err := c.Wait(); err != nil {
		t.Fatalf("launcher: %v (%s)", err, out.String())
	}
	line := string(<-report)
	pid := strconv.Itoa(c.Process.Pid)
	if strings.TrimSpace(out.String()) != pid {
		t.Fatalf("command printed %q, want its pid %s (the launcher's, exec'd in place) and no leaked descriptor", out.String(), pid)
	}
	if !strings.HasPrefix(line, pid+" (") || !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("report %q, want one stat line of pid %s", line, pid)
	}
}

// TestLauncherWithoutIdentityDescriptor: a launcher told to report but
// given no descriptor does not run the command.
func TestLauncherWithoutIdentityDescriptor(t *testing.T) {
	c := launcher(t, ocispec.IdentityArg, "--", "sh", "-c", "echo ran")
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitNoIdentity || out.Len() != 0 || !strings.Contains(errb.String(), "not started") {
		t.Fatalf("launcher without descriptor: %v, stdout %q, stderr %q", err, out.String(), errb.String())
	}
}

// TestLauncherCommandNotFoundReportsNothing: a command that is not found
// gets the shell's 127 and no identity report (the Host Coordinator sees
// the descriptor closed unreported).
func TestLauncherCommandNotFoundReportsNothing(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := launcher(t, ocispec.IdentityArg, "--", "no-such-command-here")
	c.ExtraFiles = []*os.File{w}
	var errb bytes.Buffer
	c.Stderr = &errb
	err = c.Run()
	w.Close()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitNotFound || !strings.Contains(errb.String(), "command not found") {
		t.Fatalf("launcher: %v, stderr %q", err, errb.String())
	}
	if b, _ := io.ReadAll(r); len(b) != 0 {
		t.Fatalf("report %q for a command that did not start", b)
	}
}

// TestInitSettleKeepsExecutable: the init's settle gives back heap only.
// Inside gVisor its code pages carry the platform's patched system call
// sites, and unmapping them crashes threads sleeping in those calls
// (package idlemem); natively Settle would unmap them here.
func TestInitSettleKeepsExecutable(t *testing.T) {
	if r := settleIdle(nil); r.TextMappings != 0 || r.TextBytes != 0 {
		t.Fatalf("the init's settle unmapped %d executable mappings (%d bytes)", r.TextMappings, r.TextBytes)
	}
}
