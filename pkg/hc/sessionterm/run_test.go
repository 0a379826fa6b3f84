package sessionterm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/sandboxinit"
)

// These tests drive Run, the whole life of an interactive session's
// terminal, with a real PTY, the real causal broker and real processes,
// and with this test binary standing in for runsc (hostRunsc): the
// "sandbox" is the host, so the guest leader's pid, its process group and
// its /proc/<pid>/stat are the host's, and group signals are real.

func TestMain(m *testing.M) {
	proc.MaybeRunWrapper() // the broker's fallback barrier re-executes the test binary
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "--root=") {
		os.Exit(hostRunsc(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// hostRunsc is the runsc stand-in: exec runs the process document's
// command on the host (after its pid file names it: the exec client is
// the guest leader), ps lists host processes with their groups and kill
// --pgid signals a host process group.
func hostRunsc(args []string) int {
	root := ""
	for len(args) > 0 && strings.HasPrefix(args[0], "--") {
		if r, ok := strings.CutPrefix(args[0], "--root="); ok {
			root = r
		}
		args = args[1:] // global flags
	}
	if len(args) == 0 {
		return 2
	}
	logInvocation(root, args)
	switch cmd, rest := args[0], args[1:]; cmd {
	case "exec":
		var process, pidFile string
		for i := 0; i+1 < len(rest); i++ {
			switch rest[i] {
			case "--process":
				process = rest[i+1]
			case "--internal-pid-file":
				pidFile = rest[i+1]
			}
		}
		b, err := os.ReadFile(process)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		var doc struct {
			Args []string `json:"args"`
			Env  []string `json:"env"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
		argv, identify := doc.Args, false
		for i, a := range argv {
			if a == ocispec.IdentityArg {
				identify = true
			}
			if a == "--" {
				argv = argv[i+1:]
				break
			}
		}
		path, err := lookPath(argv[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 127
		}
		if pidFile != "" {
			if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
				return 125
			}
		}
		// The launcher's report, as lazaret-init makes it in the sandbox.
		if identify {
			if err := sandboxinit.ReportIdentity(ocispec.IdentityFD); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return sandboxinit.ExitNoIdentity
			}
		}
		// A guest process starts with default signal dispositions, even
		// when this test runs with SIGINT and SIGQUIT ignored (a
		// background job): a handled signal is reset to the default by
		// exec, an ignored one would stay ignored.
		signal.Notify(make(chan os.Signal, 1), unix.SIGINT, unix.SIGQUIT)
		err = unix.Exec(path, argv, os.Environ())
		fmt.Fprintln(os.Stderr, err)
		return 126
	case "ps":
		fmt.Println("UID       PID       PPID      PGID      C         TTY       STIME     TIME      CMD")
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			line := string(b)
			f := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
			fmt.Printf("0 %d %s %s 0 ? 00:00 0s x\n", pid, f[1], f[2])
		}
		return 0
	case "kill":
		if len(rest) != 3 || !strings.HasPrefix(rest[0], "--pgid=") {
			return 2
		}
		pgid, err := strconv.Atoi(strings.TrimPrefix(rest[0], "--pgid="))
		if err != nil || pgid <= 1 {
			return 2
		}
		if err := unix.Kill(-pgid, unix.SignalNum("SIG"+rest[2])); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	return 2
}

// logInvocation appends the stand-in's subcommand and, for exec, the
// process document's args to invocationLog in the runsc root.
func logInvocation(root string, args []string) {
	line := strings.Join(args, " ")
	if args[0] == "exec" {
		line = "exec"
		for i, a := range args {
			if a == "--process" && i+1 < len(args) {
				var doc struct {
					Args []string `json:"args"`
				}
				if b, err := os.ReadFile(args[i+1]); err == nil && json.Unmarshal(b, &doc) == nil {
					line += " " + strings.Join(doc.Args, " ")
				}
			}
		}
	}
	if f, err := os.OpenFile(filepath.Join(root, invocationLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

const invocationLog = "invocations"

// invocations returns the stand-in's log of runsc invocations.
func (h *runHarness) invocations() string {
	b, _ := os.ReadFile(filepath.Join(h.dir, invocationLog))
	return string(b)
}

func lookPath(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found", name)
}

// memRecorder records the transitions in order.
type memRecorder struct {
	mu    sync.Mutex
	steps []string
	ids   []Identity
	// accepted, when set, is closed once the client read the session's
	// Accepted frame: RecordRunning refuses to record before it, so a
	// session whose Accepted followed its command's start fails.
	accepted <-chan struct{}
}

func (r *memRecorder) add(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, s)
	return nil
}
func (r *memRecorder) RecordIntent(_ context.Context, id string, gen uint64) error {
	return r.add("Intent")
}
func (r *memRecorder) RecordStaged(_ context.Context, id string, exec pidfs.Identity) error {
	return r.add("Staged")
}
func (r *memRecorder) RecordRunning(_ context.Context, id Identity) error {
	if r.accepted != nil {
		select {
		case <-r.accepted:
		case <-time.After(10 * time.Second):
			return errors.New("the guest group was identified (the command runs) before the client read Accepted")
		}
	}
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	return r.add("Running")
}
func (r *memRecorder) RecordReleaseIntent(_ context.Context, id string) error {
	return r.add("ReleaseIntent")
}
func (r *memRecorder) RecordClean(_ context.Context, id string) error { return r.add("Clean") }

// running waits for the session's Running record (Accepted precedes it)
// and returns its identity.
func (r *memRecorder) running(t *testing.T) Identity {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		if len(r.ids) > 0 {
			id := r.ids[0]
			r.mu.Unlock()
			return id
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no Running record within 10s (records %q)", r.trail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *memRecorder) trail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.steps, " ")
}

// noRoutes is a session without escalation routing.
type noRoutes struct{}

func (noRoutes) Channels(Route, bool) RouteChannels[int, int]      { return RouteChannels[int, int]{} }
func (noRoutes) BeginPrompt(*Terminal, int)                        {}
func (noRoutes) EndPrompt(*Terminal)                               {}
func (noRoutes) StartHost(*Terminal, int)                          {}
func (noRoutes) EndHost(*Terminal)                                 {}
func (noRoutes) Answer(*Terminal, *lv1.ClientFrame, bool) bool     { return false }
func (noRoutes) CancelHost(*Terminal, *lv1.ClientFrame, bool) bool { return false }
func (noRoutes) Close(*Terminal)                                   {}

// runHarness is one session run by Run.
type runHarness struct {
	t       *testing.T
	dir     string // the stand-in runsc's root
	rec     *memRecorder
	frames  chan *lv1.ClientFrame
	server  chan *lv1.ServerFrame
	done    chan struct{}
	refused error
	child   *proc.Child
	out     []byte // terminal output not yet consumed
}

// startRun runs argv (through sh -c when given one string) as an
// interactive session; process, when not nil, replaces its process
// document.
func startRun(t *testing.T, argv []string, process func() ([]byte, error)) *runHarness {
	return startRunWith(t, argv, process, func(bool) Routes[int, int] { return noRoutes{} })
}

// startRunRoutes runs argv with the given escalation side.
func startRunRoutes(t *testing.T, argv []string, routes func(admitted bool) Routes[int, int]) *runHarness {
	return startRunWith(t, argv, nil, routes)
}

func startRunWith(t *testing.T, argv []string, process func() ([]byte, error), routes func(admitted bool) Routes[int, int]) *runHarness {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	broker, err := proc.NewBroker(log, exe)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	accepted := make(chan struct{})
	h := &runHarness{t: t, dir: dir, rec: &memRecorder{accepted: accepted}, frames: make(chan *lv1.ClientFrame), server: make(chan *lv1.ServerFrame, 256), done: make(chan struct{})}
	d := Domain{Broker: broker, Runtime: runsc.Runtime{Path: exe, Root: dir}, Container: "ctr-1", Generation: 1, Dir: dir, Recorder: h.rec, Log: log}
	if process == nil {
		process = func() ([]byte, error) {
			return ocispec.ProcessJSON(ocispec.LaunchIdentified(ocispec.Process{Args: argv, Env: []string{"PATH=/usr/bin:/bin", "TERM=dumb"}, Cwd: "/", Terminal: true}))
		}
	}
	srv, cli := net.Pipe()
	var childMu sync.Mutex
	s := Session{ID: "s1", Argv0: argv[0], Size: &lv1.WindowSize{Rows: 24, Cols: 80}, Conn: control.NewConn(srv), Raw: srv,
		Process: process,
		Started: func(c *proc.Child) { childMu.Lock(); h.child = c; childMu.Unlock() },
		Stopped: func() bool { return false },
		Refuse:  func(err error) { h.refused = err },
	}
	go func() {
		client := control.NewConn(cli)
		var acceptedOnce sync.Once
		for {
			var fr lv1.ServerFrame
			if err := client.Read(&fr); err != nil {
				close(h.server)
				return
			}
			if fr.GetAccepted() != nil {
				acceptedOnce.Do(func() { close(accepted) })
			}
			h.server <- &fr
		}
	}()
	go func() {
		defer close(h.done)
		Run(d, s, h.frames, routes)
		srv.Close()
	}()
	t.Cleanup(func() {
		childMu.Lock()
		c := h.child
		childMu.Unlock()
		if c != nil {
			c.Signal(unix.SIGKILL)
		}
		<-h.done
		cli.Close()
	})
	return h
}

// next returns the next server frame.
func (h *runHarness) next() *lv1.ServerFrame {
	h.t.Helper()
	select {
	case fr, ok := <-h.server:
		if !ok {
			h.t.Fatal("the session connection closed")
		}
		return fr
	case <-time.After(30 * time.Second):
		h.t.Fatal("no server frame in 30s")
	}
	return nil
}

// output reads Output frames until the terminal output not yet consumed
// contains want, and consumes it up to the end of want.
func (h *runHarness) output(want string) {
	h.t.Helper()
	for !strings.Contains(string(h.out), want) {
		fr := h.next()
		if fr.GetOutput() == nil {
			h.t.Fatalf("waiting for %q after %q: frame %v", want, h.out, fr)
		}
		h.out = append(h.out, fr.GetOutput().GetData()...)
	}
	h.out = h.out[strings.Index(string(h.out), want)+len(want):]
}

// exit reads frames until Exit.
func (h *runHarness) exit() *lv1.Exit {
	h.t.Helper()
	for {
		if e := h.next().GetExit(); e != nil {
			return e
		}
	}
}

func (h *runHarness) send(fr *lv1.ClientFrame) {
	h.t.Helper()
	select {
	case h.frames <- fr:
	case <-time.After(30 * time.Second):
		h.t.Fatal("the session loop did not take the frame")
	}
}

func (h *runHarness) wait() {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		h.t.Fatal("the session did not end in 60s")
	}
}

func stdin(s string) *lv1.ClientFrame {
	return &lv1.ClientFrame{Msg: &lv1.ClientFrame_Stdin{Stdin: &lv1.StdinData{Data: []byte(s)}}}
}

// TestRunSessionLifecycle: Intent → Staged → Accepted (the exec client
// still at its exec stop: the recorder refuses Running before the client
// read it) → Running (guest leader and group identified from its stat);
// input and resize reach the terminal, Interrupt reaches the guest group;
// exactly one Exit after the output; the release records Clean once the
// group is gone.
func TestRunSessionLifecycle(t *testing.T) {
	h := startRun(t, []string{"sh", "-c", "echo ready; read a; stty size; echo got:$a; exec cat"}, nil)
	acc := h.next().GetAccepted()
	if acc == nil || acc.SessionId != "s1" || acc.Generation != 1 {
		t.Fatalf("expected Accepted, got %v", acc)
	}
	h.output("ready") // forwarded only once Running is recorded
	if got := h.rec.trail(); got != "Intent Staged Running" {
		t.Fatalf("records once the session runs: %q", got)
	}
	id := h.rec.running(t)
	if id.GuestLeaderPID <= 0 || id.GuestPGID != id.GuestLeaderPID || id.GuestLeaderStart == 0 || !strings.HasPrefix(id.PTY, "pts/") {
		t.Fatalf("running identity %+v", id)
	}
	if id.ExecClient.HostPID != uint32(id.GuestLeaderPID) {
		t.Fatalf("exec client %s is not the (host) guest leader %d", id.ExecClient, id.GuestLeaderPID)
	}
	// The loop handles one frame completely before it takes the next: the
	// resize is applied before the input that makes the command read it.
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Resize{Resize: &lv1.Resize{Size: &lv1.WindowSize{Rows: 50, Cols: 132}}}})
	h.send(stdin("hello\n"))
	h.output("50 132")
	h.output("got:hello")
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Interrupt{Interrupt: &lv1.Interrupt{}}})
	e := h.exit()
	if e.Signal != int32(unix.SIGINT) {
		t.Fatalf("exit %v, want signal %d", e, unix.SIGINT)
	}
	h.wait()
	if got := h.rec.trail(); got != "Intent Staged Running ReleaseIntent Clean" {
		t.Fatalf("records %q", got)
	}
	if err := unix.Kill(id.GuestLeaderPID, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("guest leader %d still exists: %v", id.GuestLeaderPID, err)
	}
}

// TestRunClientLost: the client goes away while the command runs; the
// release signals the exact guest group (SIGHUP ends it) and records
// Clean, with no Exit frame.
func TestRunClientLost(t *testing.T) {
	h := startRun(t, []string{"sh", "-c", "echo ready; exec cat"}, nil)
	if h.next().GetAccepted() == nil {
		t.Fatal("not accepted")
	}
	h.output("ready")
	close(h.frames)
	h.wait()
	if got := h.rec.trail(); got != "Intent Staged Running ReleaseIntent Clean" {
		t.Fatalf("records %q", got)
	}
	if err := unix.Kill(h.rec.running(t).GuestLeaderPID, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("guest leader still exists: %v", err)
	}
	// The leader was running: the release checked it in the guest first.
	if inv := h.invocations(); !strings.Contains(inv, "/proc/"+strconv.Itoa(h.rec.running(t).GuestLeaderPID)+"/stat") {
		t.Fatalf("no guest check of the running leader among the runsc invocations:\n%s", inv)
	}
}

// TestRunResizeToTheSameSizeSignalsNothing: a resize to the size the
// terminal has (what the CLI sends once accepted) sends no SIGWINCH (no
// runsc kill), as the kernel sends none for it; a real change does.
func TestRunResizeToTheSameSizeSignalsNothing(t *testing.T) {
	h := startRun(t, []string{"sh", "-c", "echo ready; read a; stty size; read b; stty size"}, nil)
	if h.next().GetAccepted() == nil {
		t.Fatal("not accepted")
	}
	h.output("ready")
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Resize{Resize: &lv1.Resize{Size: &lv1.WindowSize{Rows: 24, Cols: 80}}}})
	h.send(stdin("x\n"))
	h.output("24 80")
	h.send(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Resize{Resize: &lv1.Resize{Size: &lv1.WindowSize{Rows: 25, Cols: 80}}}})
	// The group signal of the real change (its runsc kill) is logged.
	kills := func() int { return strings.Count(h.invocations(), "kill --pgid=") }
	for deadline := time.Now().Add(10 * time.Second); kills() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	h.send(stdin("y\n"))
	h.output("25 80")
	if e := h.exit(); e.Code != 0 {
		t.Fatalf("exit %v", e)
	}
	h.wait()
	if n := kills(); n != 1 {
		t.Fatalf("%d group signals for one resize to the same size and one to a new size, want 1:\n%s", n, h.invocations())
	}
}

// TestRunNormalExitReleasesWithoutLeaderCheck: a command that exits with
// its own status has been waited for by its exec client, so the release
// checks no leader in the guest (no runsc exec of cat); it still looks
// for the group's remaining members (runsc ps) before Clean.
func TestRunNormalExitReleasesWithoutLeaderCheck(t *testing.T) {
	h := startRun(t, []string{"sh", "-c", "echo ready; exit 3"}, nil)
	if h.next().GetAccepted() == nil {
		t.Fatal("not accepted")
	}
	if e := h.exit(); e.Code != 3 || e.Signal != 0 {
		t.Fatalf("exit %v, want status 3", e)
	}
	h.wait()
	if got := h.rec.trail(); got != "Intent Staged Running ReleaseIntent Clean" {
		t.Fatalf("records %q", got)
	}
	inv := h.invocations()
	if strings.Contains(inv, "/stat") || !strings.Contains(inv, "\nps ctr-1\n") {
		t.Fatalf("runsc invocations of the release:\n%s\nwant ps and no guest stat", inv)
	}
}

// TestRunGroupOutlivesLeader: a process of the guest group that ignores
// SIGHUP and SIGTERM outlives its leader; once the leader is gone no
// group signal may be sent (its pid could be reused), so the record stays
// in ReleaseIntent for the Domain's teardown.
func TestRunGroupOutlivesLeader(t *testing.T) {
	// The leader (cat) ends at SIGHUP; the survivor ignores it.
	h := startRun(t, []string{"sh", "-c", `sh -c 'trap "" HUP TERM; echo ready; exec sleep 300' & exec cat`}, nil)
	if h.next().GetAccepted() == nil {
		t.Fatal("not accepted")
	}
	pgid := h.rec.running(t).GuestPGID
	t.Cleanup(func() { unix.Kill(-pgid, unix.SIGKILL) })
	h.output("ready")
	close(h.frames)
	h.wait()
	if got := h.rec.trail(); got != "Intent Staged Running ReleaseIntent" {
		t.Fatalf("records %q, want the record left in ReleaseIntent", got)
	}
	if err := unix.Kill(-pgid, 0); err != nil {
		t.Fatalf("the guest group is gone (%v): the test's survivor did not survive", err)
	}
}

// TestRunRefusedBeforeExec: a process document that cannot be made
// refuses the session after its Intent; the release cleans the record
// without any Running.
func TestRunRefusedBeforeExec(t *testing.T) {
	h := startRun(t, []string{"nothing"}, func() ([]byte, error) { return nil, errors.New("no such user") })
	h.wait()
	if h.refused == nil || !strings.Contains(h.refused.Error(), "no such user") {
		t.Fatalf("refusal %v", h.refused)
	}
	if got := h.rec.trail(); got != "Intent ReleaseIntent Clean" {
		t.Fatalf("records %q", got)
	}
}

// TestRunCommandNotFound: the exec client fails before it reports a guest
// pid; the command's status is still delivered, no event is admitted and
// the record is released and cleaned.
func TestRunCommandNotFound(t *testing.T) {
	h := startRun(t, []string{"no-such-command-here"}, nil)
	if h.next().GetAccepted() == nil {
		t.Fatal("not accepted")
	}
	e := h.exit()
	if e.Code != 127 {
		t.Fatalf("exit %v, want 127", e)
	}
	h.wait()
	if got := h.rec.trail(); got != "Intent Staged ReleaseIntent Clean" {
		t.Fatalf("records %q", got)
	}
}
