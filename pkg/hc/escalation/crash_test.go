package escalation

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/trust"
	"github.com/lazaret/lazaret/pkg/trust/trusttest"
)

// crashRootEnv makes the test binary a coordinator of generation 4 that
// runs one host command and waits to be killed (TestEscalationCrashWithHostProcess).
const crashRootEnv = "LAZARET_ESCALATION_TEST_CRASH_ROOT"

// crashCoordinator is that coordinator: a Service whose one session's
// auto-approved `sleep` runs on the host; the host process's pid goes to
// <root>/host.pid. It never returns.
func crashCoordinator(root string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash coordinator:", err)
		os.Exit(2)
	}
	g, err := trusttest.New(4)
	if err != nil {
		fail(err)
	}
	a, id := g.Anchor, g.ID
	broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), os.Args[0])
	if err != nil {
		fail(err)
	}
	sessions := &fakeSessions{all: map[string]bool{}}
	e, err := New(Config{Anchor: a, RuntimeDir: filepath.Join(root, "r"), ControlMount: filepath.Join(root, "c"), DomainRoot: filepath.Join(root, "d"),
		Workspace: filepath.Join(root, "ws"), Rules: []config.Rule{{Match: config.MatchPrefix, Argv: []string{"sleep"}}}, Sessions: sessions, Launcher: broker})
	if err != nil {
		fail(err)
	}
	started := make(chan *proc.Child, 1)
	e.Hooks.HostStarted = func(_ string, c *proc.Child) { started <- c }
	an, err := trust.NewSessionAnchor(nil)
	if err != nil {
		fail(err)
	}
	client := &trust.ClientIdentity{ClientID: randomID()}
	capRec, _, err := a.IssueSessionCapability(an.Registration(a.Identity(), client.ClientID), client)
	if err != nil {
		fail(err)
	}
	sessions.all[an.SessionID] = false
	req := &lv1.EscalationRequest{RequestId: randomID(), DomainId: id.DomainID, Generation: 4, SessionCapability: capRec.Encode(), Argv: []string{"sleep", "1000"}}
	b, err := record.Seal(record.KindRequest, req, record.KeySigner(g.SandboxKey))
	if err != nil {
		fail(err)
	}
	reqDir, _ := e.MailboxDirs()
	tmp := filepath.Join(reqDir, "."+req.RequestId)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(reqDir, req.RequestId+escalate.RequestSuffix)); err != nil {
		fail(err)
	}
	select {
	case c := <-started:
		if err := os.WriteFile(filepath.Join(root, "host.pid"), []byte(strconv.Itoa(c.Handle().PID())), 0o600); err != nil {
			fail(err)
		}
	case <-time.After(30 * time.Second):
		fail(fmt.Errorf("the host command did not start"))
	}
	select {} // until killed
}

// TestEscalationCrashWithHostProcess (recovery): a coordinator killed
// while its host command runs leaves no host process behind (the
// broker's parent-death edge kills it), and the next generation removes
// the dead generation's mailbox before it serves its own.
func TestEscalationCrashWithHostProcess(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"r", "c", "d", "ws"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashRootEnv+"="+root)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var pid int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(root, "host.pid")); err == nil && len(b) > 0 {
			pid, _ = strconv.Atoi(string(b))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the coordinator did not start its host command")
		}
	}
	host, err := pidfs.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !host.Alive() || !strings.HasPrefix(string(cl), "sleep\x001000") {
		t.Fatalf("pid %d is not the running host command (%q)", pid, cl)
	}
	deadMailbox := filepath.Join(root, "r", "mailbox", "g4")
	if _, err := os.Stat(deadMailbox); err != nil {
		t.Fatalf("the coordinator's mailbox: %v", err)
	}

	// The crash.
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); host.Alive(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the host command outlived its killed coordinator")
		}
	}

	// The next generation of the Domain.
	next := newFixtureAt(t, root, 5)
	if _, err := os.Stat(deadMailbox); !os.IsNotExist(err) {
		t.Fatalf("the dead generation's mailbox survived the next generation's start: %v", err)
	}
	s := next.session(true, false)
	req := next.submit(s, "id")
	if res := next.result(req.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED {
		t.Errorf("the next generation's request: %v", res)
	}
}
