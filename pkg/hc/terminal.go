package hc

// Interactive Client Sessions (spec §3.3 Session Terminals).
//
// The coordinator owns one host PTY master per interactive session; the
// slave is the stdin, stdout, stderr and controlling terminal of a
// non-detached `runsc exec` whose process document says `terminal: true`
// (no --console-socket). The CLI never holds the sandbox PTY: it relays
// bytes and events over its control connection.
//
// Acquisition (the Session Terminal record, terminalrec.go):
//
//	RecordIntent → pty.Open → broker.Acquire(exec wrapper, Setsid+Setctty)
//	  → guest leader pid (--internal-pid-file) → guest /proc/<pid>/stat
//	  (pgrp == pid, start time) → RecordRunning → Accepted → events admitted
//
// One event loop per session serializes client frames (input, resize,
// interrupt/quit/suspend/continue), the end of PTY output and exec-client
// completion. PTY output has no user-space queue: one pump per session
// reads the master (aggregated up to termFrameMax per read) only while the
// route is the sandbox route and writes each read as one Output frame
// straight from its buffer (control.WriteOutput), so a slow client or
// another route (Prompt, HostProcess: escalation_terminal.go) stops reading
// the master and the kernel PTY buffer pushes back on the guest. Input,
// resize and signal events are admitted only on the sandbox route. Input
// waits for the PTY writer by not reading more client frames; group
// signals go through a bounded worker (SIGWINCH coalesced). Sessions never
// share a queue, a goroutine or a connection.
//
// Close: exec-client exit → the close handshake (the shown prompt is
// cancelled, a running host process killed, reaped, audited and answered)
// → drain the master in order until EOF or the drain deadline → exactly
// one Exit after the last byte. Release (close,
// lost connection, PTY or exec loss): RecordReleaseIntent; while the exact
// guest leader (pid and start time) still leads the group: SIGHUP, grace,
// SIGTERM, grace, SIGKILL to that group (`runsc kill --pgid`); SIGKILL and
// reap the exact exec client through its pidfd; close the master;
// RecordClean only when the group, the exec client and the PTY are absent.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/pty"
)

// Bounds of one interactive session.
const (
	// termFrameMax bounds one PTY read (aggregated until EAGAIN), sent as
	// one Output frame. With the frame's length header and protobuf prefix
	// (at most control.OutputHeadroom bytes) a full frame is at most 64 KiB,
	// so it goes out as four TLS records, never with a fifth record of a
	// few bytes (one more socket write here, one more record in the CLI).
	termFrameMax = 4*tlsRecordMax - control.OutputHeadroom
	// tlsRecordMax is the largest TLS plaintext record (RFC 8446 §5.1).
	tlsRecordMax    = 16 << 10
	termInputQueue  = 64 // input chunks waiting for the PTY writer
	termSignalQueue = 8  // group signals waiting for runsc kill
	identifyTimeout = 10 * time.Second
	writeOutTimeout = 5 * time.Second // final frames to a client that stopped reading
)

// terminalRoute is the modeled terminal route of a session (the model's
// terminalRoute: Detached, Sandbox, Prompt, HostProcess). Only the sandbox
// route forwards PTY output and admits input, resize and signal events.
type terminalRoute int

const (
	routeNone terminalRoute = iota // Detached
	routeSandbox
	// routePrompt: the session's terminal shows an escalation prompt
	// (escalation_terminal.go); its PTY is not read and no input reaches it.
	routePrompt
	// routeHostProcess: an approved host command of the session's
	// escalation runs (StartHostExecution until its exact process is gone);
	// its PTY is not read and no input, resize or signal event reaches the
	// sandbox. Only the developer's HostProcessCancel is admitted.
	routeHostProcess
)

func (r terminalRoute) String() string {
	switch r {
	case routeSandbox:
		return "sandbox"
	case routePrompt:
		return "prompt"
	case routeHostProcess:
		return "host-process"
	}
	return "detached"
}

// clock is the time source of deadlines and grace periods (injected so the
// release sequence can be driven in tests).
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// validateTerminal checks the terminal fields of a RunRequest.
func validateTerminal(r *lv1.RunRequest) error {
	if !r.Tty {
		if r.WindowSize != nil {
			return errdefs.New(errdefs.ErrInvalid, "window size given for a session without a terminal")
		}
		return nil
	}
	if r.WindowSize == nil {
		return errdefs.New(errdefs.ErrInvalid, "interactive session without a window size")
	}
	return sizeOf(r.WindowSize).Validate()
}

func sizeOf(w *lv1.WindowSize) pty.Size {
	return pty.Size{Rows: w.GetRows(), Cols: w.GetCols(), XPixels: w.GetXPixels(), YPixels: w.GetYPixels()}
}

// terminal is one interactive session's physical terminal.
type terminal struct {
	s      *session
	log    *slog.Logger
	clock  clock
	rec    sessionterm.Recorder
	master *pty.Master
	child  *proc.Child
	id     sessionterm.Identity
	// identified: the guest leader and group are known (Running reached).
	identified bool
	route      terminalRoute
	gate       *outputGate // open while route is routeSandbox
}

// runTerminal runs an interactive session (req.Tty) until it closes.
func (s *session) runTerminal(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) {
	c := s.c
	ctx := context.Background()
	t := &terminal{s: s, log: c.log.With("session_id", s.id, "tty", true), clock: realClock{}, rec: c.terminalRecorder()}
	t.id = sessionterm.Identity{SessionID: s.id, Generation: c.generation, Container: c.container}
	// 1. Intent.
	if err := t.rec.RecordIntent(ctx, s.id, c.generation); err != nil {
		refuse(s.conn, err)
		return
	}
	fail := func(err error) {
		refuse(s.conn, err)
		t.release(ctx)
	}
	cwd := ocispec.WorkspaceDir
	if req.WorkspaceSubdir != "" {
		cwd = path.Join(cwd, req.WorkspaceSubdir)
	}
	u, err := c.sessionUser(req)
	if err != nil {
		fail(err)
		return
	}
	pj, err := ocispec.ProcessJSON(ocispec.Process{Args: ocispec.SessionArgs(req.Argv), Env: s.env(req, u), Cwd: cwd, Terminal: true, UID: u.UID, GID: u.GID, Rlimits: c.rlimits()})
	if err != nil {
		fail(errdefs.Mark(err, errdefs.ErrInvalid))
		return
	}
	pjFile := filepath.Join(c.sessionDir(), s.id+".json")
	if err := os.WriteFile(pjFile, pj, 0o600); err != nil {
		fail(err)
		return
	}
	defer os.Remove(pjFile)
	pidFile := filepath.Join(c.sessionDir(), s.id+".pid")
	defer os.Remove(pidFile)
	// 2. PTY and the exec wrapper through the causal broker.
	master, slave, err := pty.Open(sizeOf(req.WindowSize))
	if err != nil {
		fail(fmt.Errorf("allocate session terminal: %w", err))
		return
	}
	t.master = master
	if n, err := master.Index(); err == nil {
		t.id.PTY = "pts/" + strconv.Itoa(n)
	}
	argv := c.rt.Exec(pjFile, pidFile, c.container)
	c.timing.Mark("session admitted; starting runsc exec")
	child, err := c.broker.Acquire(ctx, proc.AcquireSpec{
		Slot:     "session_exec",
		ExecStop: true, // no wrapper re-exec of lazaret-hc on the session start path
		Target: proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/",
			Files: []*os.File{slave, slave, slave}, Setsid: true, Setctty: true},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			t.log.Debug("staged ownership", "slot", "session_exec", "identity", id.String())
			return t.rec.RecordStaged(ctx, s.id, id)
		},
	})
	slave.Close() // the exec client holds the only slave descriptors now
	if err != nil {
		fail(fmt.Errorf("start session command: %w", err))
		return
	}
	t.child = child
	t.id.ExecClient = child.Identity()
	s.setChild(child)
	// 3. The guest process group and its leader.
	admitted := false
	if err := t.identify(ctx, pidFile); err != nil {
		select {
		case <-child.Done():
			// The command ended before it could be identified (e.g. a
			// command that exits at once): no event is ever admitted; its
			// output and status are still delivered.
			t.log.Debug("session ended before its guest group was identified", "err", err)
		default:
			fail(fmt.Errorf("identify the session's guest process group: %w", err))
			return
		}
	} else {
		// 4. One transaction to Running; 5. only then events are admitted.
		if err := t.rec.RecordRunning(ctx, t.id); err != nil {
			fail(err)
			return
		}
		admitted = true
	}
	t.gate = newOutputGate()
	t.setRoute(routeSandbox)
	c.timing.Mark("session started")
	t.log.Info("session started", "argv0", req.Argv[0], "joined", joined, "pty", t.id.PTY, "size", sizeOf(req.WindowSize).String(),
		"guest_pid", t.id.GuestLeaderPID, "guest_pgid", t.id.GuestPGID, "guest_start", t.id.GuestLeaderStart)
	s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: s.id, Generation: c.generation, Joined: joined, SessionCapability: s.capability}}})
	clientGone := t.loop(frames, admitted)
	if clientGone {
		t.log.Info("client connection lost: releasing the session terminal")
	}
	t.release(ctx)
}

// identify reads the guest leader pid from --internal-pid-file and the
// leader's process group and start time from the guest's /proc/<pid>/stat,
// and checks that the leader leads its group.
func (t *terminal) identify(ctx context.Context, pidFile string) error {
	deadline := t.clock.Now().Add(identifyTimeout)
	pid := 0
	for {
		if b, err := os.ReadFile(pidFile); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				pid = n
				break
			}
		}
		select {
		case <-t.child.Done():
			return errdefs.New(errdefs.ErrUnavailable, "exec client exited before reporting the guest pid")
		case <-t.clock.After(10 * time.Millisecond):
		}
		if t.clock.Now().After(deadline) {
			return errdefs.New(errdefs.ErrUnavailable, "no guest pid within %s", identifyTimeout)
		}
	}
	st, err := t.guestStat(ctx, pid)
	if err != nil {
		return err
	}
	if st.pgrp != pid {
		return errdefs.New(errdefs.ErrRefused, "guest leader %d is in process group %d, not its own", pid, st.pgrp)
	}
	t.id.GuestLeaderPID, t.id.GuestPGID, t.id.GuestLeaderStart = pid, st.pgrp, st.start
	t.identified = true
	return nil
}

type guestStat struct {
	pgrp  int
	start uint64
}

// parseStat parses a /proc/<pid>/stat line: the comm field may contain
// spaces and parentheses, so fields are counted after the last ')'.
func parseStat(line string, pid int) (guestStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 || !strings.HasPrefix(line, strconv.Itoa(pid)+" (") {
		return guestStat{}, fmt.Errorf("malformed stat %q", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); pgrp is field 5, starttime field 22.
	if len(f) < 20 {
		return guestStat{}, fmt.Errorf("short stat %q", line)
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return guestStat{}, fmt.Errorf("malformed stat %q", line)
	}
	return guestStat{pgrp: pgrp, start: start}, nil
}

// guestStat reads /proc/<pid>/stat inside the sandbox with a short `runsc
// exec` of cat (the guest's /proc is the only source of an exact start
// time: `runsc ps` shows it to the minute). An absent process is an error.
func (t *terminal) guestStat(ctx context.Context, pid int) (guestStat, error) {
	c := t.s.c
	pj, err := ocispec.ProcessJSON(ocispec.Process{Args: ocispec.SessionArgs([]string{"cat", fmt.Sprintf("/proc/%d/stat", pid)}), Env: c.baseEnv, Cwd: "/", Rlimits: c.rlimits()})
	if err != nil {
		return guestStat{}, err
	}
	f := filepath.Join(c.sessionDir(), t.s.id+".stat.json")
	if err := os.WriteFile(f, pj, 0o600); err != nil {
		return guestStat{}, err
	}
	defer os.Remove(f)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	argv := c.rt.Exec(f, "", c.container)
	out, stderr, st, err := c.broker.Output(ctx, "runsc_exec_stat", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/"}, 64<<10)
	if err != nil {
		return guestStat{}, fmt.Errorf("read guest stat of %d: %w", pid, err)
	}
	if st.ShellCode() != 0 {
		return guestStat{}, errdefs.New(errdefs.ErrUnavailable, "guest process %d absent (%s: %s)", pid, st.String(), strings.TrimSpace(string(stderr)))
	}
	return parseStat(strings.TrimSpace(string(out)), pid)
}

// leaderMatches reports whether the recorded guest leader still exists with
// the recorded start time and still leads the recorded group.
func (t *terminal) leaderMatches(ctx context.Context) bool {
	st, err := t.guestStat(ctx, t.id.GuestLeaderPID)
	if err != nil {
		t.log.Debug("guest leader absent", "guest_pid", t.id.GuestLeaderPID, "err", err)
		return false
	}
	if st.start != t.id.GuestLeaderStart || st.pgrp != t.id.GuestPGID {
		t.log.Warn("guest leader mismatch: refusing the process-group signal", "guest_pid", t.id.GuestLeaderPID,
			"recorded_start", t.id.GuestLeaderStart, "start", st.start, "recorded_pgid", t.id.GuestPGID, "pgid", st.pgrp)
		return false
	}
	return true
}

// groupPresent reports whether any guest process is in the recorded group
// (from the PGID column of `runsc ps`).
func (t *terminal) groupPresent(ctx context.Context) (bool, error) {
	c := t.s.c
	argv := append(append([]string{c.rt.Path}, c.rt.GlobalFlags()...), "ps", c.container)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, stderr, st, err := c.broker.Output(ctx, "runsc_ps", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/"}, 1<<20)
	if err != nil {
		return true, err
	}
	if st.ShellCode() != 0 {
		return true, fmt.Errorf("runsc ps: %s: %s", st.String(), strings.TrimSpace(string(stderr)))
	}
	return psHasGroup(out, t.id.GuestPGID)
}

// psHasGroup parses `runsc ps` table output (UID PID PPID PGID …).
func psHasGroup(out []byte, pgid int) (bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	col := -1
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if col < 0 {
			for i, h := range f {
				if h == "PGID" {
					col = i
				}
			}
			if col < 0 {
				return true, fmt.Errorf("runsc ps: no PGID column in %q", sc.Text())
			}
			continue
		}
		if len(f) > col && f[col] == strconv.Itoa(pgid) {
			return true, nil
		}
	}
	if col < 0 {
		return true, fmt.Errorf("runsc ps: empty output")
	}
	return false, nil
}

// signalGroup delivers sig to the recorded guest process group.
func (t *terminal) signalGroup(sig unix.Signal) {
	c := t.s.c
	t.log.Debug("guest group signal", "guest_pgid", t.id.GuestPGID, "signal", unix.SignalName(sig))
	c.runscQuiet(c.rt.KillGroup(c.container, strings.TrimPrefix(unix.SignalName(sig), "SIG"), t.id.GuestPGID))
}

// outputGate admits PTY output while the session's route is the sandbox
// route. The pump waits on it before every read of the master (so another
// route stops reading and the kernel PTY buffer pushes back on the guest)
// and forwards what it read only while it holds the gate open (so at most
// one read is held, and none is forwarded once the gate has closed).
type outputGate struct {
	// fwd is held while a read is forwarded; closing the gate takes it, so
	// when set(false) returns no output frame is being written and none
	// will be until the gate opens again.
	fwd  sync.Mutex
	mu   sync.Mutex
	open bool
	wake chan struct{} // closed and replaced on every change
}

func newOutputGate() *outputGate { return &outputGate{wake: make(chan struct{})} }

func (g *outputGate) set(open bool) {
	if !open {
		g.fwd.Lock()
		defer g.fwd.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != open {
		g.open = open
		close(g.wake)
		g.wake = make(chan struct{})
	}
}

func (g *outputGate) isOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// forward runs write while holding the gate open; it waits for the gate
// and reports false if quit closed first.
func (g *outputGate) forward(quit <-chan struct{}, write func() error) (bool, error) {
	for g.wait(quit) {
		g.fwd.Lock()
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		if open {
			err := write()
			g.fwd.Unlock()
			return true, err
		}
		g.fwd.Unlock()
	}
	return false, nil
}

// wait blocks until the gate is open (true) or quit closes (false).
func (g *outputGate) wait(quit <-chan struct{}) bool {
	for {
		g.mu.Lock()
		open, wake := g.open, g.wake
		g.mu.Unlock()
		if open {
			return true
		}
		select {
		case <-wake:
		case <-quit:
			return false
		}
	}
}

// setRoute changes the modeled terminal route and the output gate with it.
// Leaving the sandbox route also wakes a pump waiting in a read of the
// master (a read deadline in the past): it goes back to waiting for the
// gate, so the master is not read at all until the route is the sandbox
// route again; only a read already copying bytes completes (and is held).
func (t *terminal) setRoute(r terminalRoute) {
	t.route = r
	if t.gate == nil {
		return
	}
	if r == routeSandbox {
		t.master.SetReadDeadline(time.Time{})
		t.gate.set(true)
		return
	}
	t.gate.set(false)
	t.master.SetReadDeadline(time.Unix(1, 0))
}

// pumpOutput forwards PTY output to the client until the master reports
// EOF, the drain deadline passes, the connection fails or quit closes. It
// is the only writer of Output frames; each read (aggregated up to
// termFrameMax) goes out as one frame straight from the read buffer, so a
// client that does not read blocks the pump, the pump stops reading the
// master and the kernel PTY buffer pushes back on the guest. No user-space
// queue holds terminal output.
func (t *terminal) pumpOutput(quit <-chan struct{}) {
	buf := make([]byte, control.OutputHeadroom+termFrameMax)
	for t.gate.wait(quit) {
		n, err := t.master.Read(buf[control.OutputHeadroom:])
		if n > 0 {
			ok, werr := t.gate.forward(quit, func() error {
				return t.s.conn.WriteOutput(lv1.Stream_STREAM_TERMINAL, buf[:control.OutputHeadroom+n])
			})
			if !ok {
				return
			}
			if werr != nil {
				t.log.Debug("terminal output not delivered", "err", werr)
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !t.gate.isOpen() {
				continue // woken by a route change, not the drain deadline
			}
			return
		}
	}
}

// loop is the session's serialized event loop. It returns when the session
// closed normally (Exit sent) or the client went away (true).
func (t *terminal) loop(frames <-chan *lv1.ClientFrame, admitted bool) (clientGone bool) {
	s := t.s
	quit := make(chan struct{})
	defer close(quit)

	// Output pump: PTY master → client, gated by the route.
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		t.pumpOutput(quit)
	}()
	// PTY writer: blocks while the guest does not read its terminal.
	inQ := make(chan []byte, termInputQueue)
	go func() {
		dead := false
		for b := range inQ {
			if !dead {
				if _, err := t.master.Write(b); err != nil {
					dead = true
				}
			}
		}
	}()
	// Group signal worker: one runsc kill at a time, SIGWINCH coalesced.
	sigQ := make(chan unix.Signal, termSignalQueue)
	winch := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case sig, ok := <-sigQ:
				if !ok {
					return
				}
				t.signalGroup(sig)
			case <-winch:
				t.signalGroup(unix.SIGWINCH)
			case <-quit:
				return
			}
		}
	}()
	defer close(inQ)
	defer close(sigQ)

	var pendingIn []byte
	closing := false
	prompts := t.prompts(admitted)
	childDone := t.child.Done()
	pumpDone := (<-chan struct{})(pumped)
	for {
		var frameC <-chan *lv1.ClientFrame
		var inC chan<- []byte
		if pendingIn != nil {
			inC = inQ
		} else {
			frameC = frames
		}
		if closing && pumpDone == nil {
			break
		}
		ch := prompts.channels(t.route, closing)
		select {
		case a := <-ch.ask:
			prompts.begin(t, a)
		case <-ch.askDone:
			prompts.end(t)
		case h := <-ch.host:
			prompts.startHost(t, h)
		case <-ch.hostDone:
			prompts.endHost(t)
		case <-pumpDone:
			pumpDone = nil
			if !closing {
				// PTY loss starts the same release: no prompt stays shown
				// and no host process outlives it.
				t.log.Debug("session terminal output ended before the exec client exited")
				prompts.close(t)
			}
		case inC <- pendingIn:
			pendingIn = nil
		case <-childDone:
			// Close handshake: no further event is admitted. First the
			// shown prompt is cancelled or the running host process is
			// killed, reaped, audited and answered (serialized before any
			// terminal output); then the pump drains the terminal in order
			// until EOF or the drain deadline.
			childDone = nil
			closing = true
			prompts.close(t)
			t.master.SetReadDeadline(t.clock.Now().Add(drainTimeout))
		case f, ok := <-frameC:
			if !ok {
				// Lost connection: nothing more is forwarded; the prompt and
				// the host process end first (the final frames go nowhere),
				// then the caller performs the same physical release.
				s.raw.SetWriteDeadline(t.clock.Now().Add(writeOutTimeout))
				prompts.close(t)
				t.setRoute(routeNone)
				return true
			}
			if prompts.answer(t, f, closing) || prompts.cancelHost(t, f, closing) {
				continue
			}
			if closing || !admitted || t.route != routeSandbox {
				t.log.Debug("terminal event refused", "closing", closing, "admitted", admitted, "route", t.route.String())
				continue
			}
			pendingIn = t.event(f, sigQ, winch)
		}
	}
	st, werr := t.child.Status()
	code, sig := st.ShellCode(), 0
	if !st.Exited {
		sig = int(st.Signal)
	}
	if werr != nil {
		code = 125
	}
	t.s.c.timing.Mark("session command exited")
	t.log.Info("session ended", "status", st.String(), "stopped", s.wasStopped())
	// Exactly one Exit, after the last forwarded byte (the pump has ended).
	s.raw.SetWriteDeadline(t.clock.Now().Add(writeOutTimeout))
	s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: int32(code), Signal: int32(sig), Stopped: s.wasStopped()}}})
	return false
}

// event handles one admitted client frame; it returns input bytes for the
// PTY writer, if any.
func (t *terminal) event(f *lv1.ClientFrame, sigQ chan<- unix.Signal, winch chan<- struct{}) []byte {
	queue := func(sig unix.Signal) {
		select {
		case sigQ <- sig:
		default:
			t.log.Warn("terminal signal dropped: queue full", "signal", unix.SignalName(sig))
		}
	}
	switch {
	case f.GetStdin() != nil:
		if d := f.GetStdin().GetData(); len(d) > 0 {
			return d
		}
	case f.GetResize() != nil:
		size := sizeOf(f.GetResize().GetSize())
		if err := t.master.Resize(size); err != nil {
			t.log.Warn("resize refused", "size", size.String(), "err", err)
			return nil
		}
		select {
		case winch <- struct{}{}:
		default: // a SIGWINCH is already pending
		}
	case f.GetInterrupt() != nil:
		queue(unix.SIGINT)
	case f.GetQuit() != nil:
		queue(unix.SIGQUIT)
	case f.GetSuspend() != nil:
		queue(unix.SIGTSTP)
	case f.GetContinue() != nil:
		queue(unix.SIGCONT)
	case f.GetStdinClose() != nil:
		// A terminal has no end of input: EOF is the guest's VEOF byte.
	default:
		t.log.Warn("client frame refused in an interactive session")
	}
	return nil
}

// release is the physical release of the session terminal (spec §3.3).
func (t *terminal) release(ctx context.Context) {
	t.setRoute(routeNone)
	if err := t.rec.RecordReleaseIntent(ctx, t.s.id); err != nil {
		t.log.Error("record release intent", "err", err)
	}
	done := func() bool {
		if t.child == nil {
			return true
		}
		select {
		case <-t.child.Done():
			return true
		default:
			return false
		}
	}
	groupAbsent := !t.identified
	if t.identified {
		// Each step first re-checks the exact leader (pid, start time,
		// group): a mismatch or absence refuses the numeric group signal.
		// The exec client waits for exactly the leader, so its exit ends a
		// grace period early; after exec-client loss the leader is polled.
		gone := func() bool {
			deadline := t.clock.Now().Add(closeGrace)
			for t.clock.Now().Before(deadline) {
				if !done() {
					select {
					case <-t.child.Done():
						return true
					case <-t.clock.After(closeGrace):
						return false
					}
				}
				<-t.clock.After(250 * time.Millisecond)
				if !t.leaderMatches(ctx) {
					return true
				}
			}
			return false
		}
		for _, sig := range []unix.Signal{unix.SIGHUP, unix.SIGTERM, unix.SIGKILL} {
			if !t.leaderMatches(ctx) {
				break
			}
			t.signalGroup(sig)
			if gone() {
				break
			}
		}
		present, err := t.groupPresent(ctx)
		if err != nil {
			t.log.Warn("guest group state unknown", "guest_pgid", t.id.GuestPGID, "err", err)
		}
		groupAbsent = !present
	}
	if t.child != nil && !done() {
		t.child.Signal(unix.SIGKILL) // exact pidfd
		<-t.child.Done()
	}
	if t.master != nil {
		t.master.Close()
	}
	if !groupAbsent {
		t.log.Warn("guest process group outlived its leader: left in release intent for Domain teardown", "guest_pgid", t.id.GuestPGID)
		return
	}
	if err := t.rec.RecordClean(ctx, t.s.id); err != nil {
		t.log.Error("record clean", "err", err)
		return
	}
	t.log.Debug("session terminal clean")
}
