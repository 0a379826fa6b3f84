package client

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/hcstandby"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
)

// TestMain is, started as a standby coordinator (TestStandbyHandsTheStart),
// a stand-in for lazaret-hc's standby role: it reads the request and
// reports what arrived on the descriptor that became its stdout.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == hcstandby.Arg {
		req, files, err := hcstandby.Receive(hcstandby.FD, os.Args[2:])
		if err != nil || req == nil {
			os.Exit(3)
		}
		fmt.Fprintf(os.NewFile(uintptr(files[0]), "log"), "args=%s env=%s files=%d\n", strings.Join(req.Args, ","), strings.Join(req.Env, ","), len(files))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStandbyHandsTheStart: the start goes to the standby, with the
// coordinator's arguments, environment and four descriptors.
func TestStandbyHandsTheStart(t *testing.T) {
	exe, _ := os.Executable()
	sb, err := StartStandby(proctest.SelfBroker(t), exe, []string{"HOME=/h"}, []string{"--workspace=/w"})
	if err != nil {
		t.Fatal(err)
	}
	if got := procWords(t, sb.child.Handle().PID(), "environ"); !strings.Contains(got, "HOME=/h") {
		t.Errorf("the standby's environment is %q, want the coordinator's", got)
	}
	if got := procWords(t, sb.child.Handle().PID(), "cmdline"); !strings.Contains(got, "--workspace=/w") {
		t.Errorf("the standby's command line %q does not name its workspace", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	s := &Starter{Standby: sb}
	hc := s.takeStandby(exe, []string{"--lock-fd=3", "--workspace=/w"}, []string{"HOME=/h"}, w, null, null, null)
	w.Close()
	if hc == nil || s.Standby != nil {
		t.Fatalf("the start was not handed to the standby (%v)", hc)
	}
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line != "args=--lock-fd=3,--workspace=/w env=HOME=/h files=4\n" {
		t.Fatalf("the standby got %q", line)
	}
	waitDone(t, hc)
}

// TestStandbyGoneOrOtherStartsDirectly: a standby that exited, or that runs
// another lazaret-hc than the start locates, is not handed the start (the
// caller starts the coordinator itself), and is ended.
func TestStandbyGoneOrOtherStartsDirectly(t *testing.T) {
	b := proctest.SelfBroker(t)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	gone, err := StartStandby(b, "/bin/true", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, gone.child)
	s := &Starter{Standby: gone}
	if hc := s.takeStandby("/bin/true", []string{"x"}, nil, null, null, null, null); hc != nil || s.Standby != nil {
		t.Fatalf("a standby that exited was handed the start")
	}
	exe, _ := os.Executable()
	other, err := StartStandby(b, exe, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s = &Starter{Standby: other}
	if hc := s.takeStandby("/usr/bin/lazaret-hc-elsewhere", []string{"x"}, nil, null, null, null, null); hc != nil {
		t.Fatalf("a standby of another lazaret-hc was handed the start")
	}
	// Its socket closed, it read no request and exited.
	waitDone(t, other.child)
	if st, _ := other.child.Status(); st.ShellCode() != 3 {
		t.Errorf("the ended standby exited %v, want the stand-in's 3 (no request)", st)
	}
}

// procWords is /proc/PID/name (cmdline, environ) with its NUL separators
// as spaces.
func procWords(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}

func waitDone(t *testing.T, c *proc.Child) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		c.Signal(unix.SIGKILL)
		t.Fatal("the standby did not exit")
	}
}
