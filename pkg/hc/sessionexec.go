package hc

// A session's command without a terminal: its stdin, stdout and stderr are
// pipes relayed over the control connection, and the client's signals and
// group events go to its exact guest process (or group) through runsc.

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
)

// sessionProcess is what a non-interactive session's relay needs of its
// command's host side: the `runsc exec` client (*proc.Child), or the
// first session's command started by the sandbox's init (firstProcess).
type sessionProcess interface {
	Done() <-chan struct{}
	Status() (pidfs.ExitStatus, error)
	Signal(sig unix.Signal) error
}

// sessionStreams is a started non-interactive session: its process, the
// host ends of its standard streams, and how to signal its guest process
// (or group).
type sessionStreams struct {
	proc            sessionProcess
	inW, outR, errR *os.File
	signal          func(sig unix.Signal, group bool)
	// launched, for the stderr gate: whether the command was launched
	// (runsc exec's report of a launch failure is held until then).
	launched func() bool
	// by names what started the command (the log's "by"): "runsc exec"
	// unless set.
	by string
}

// sessionCwd is the session command's working directory: /workspace, or
// the subdirectory of it the CLI was started in.
func sessionCwd(req *lv1.RunRequest) string {
	if req.WorkspaceSubdir != "" {
		return path.Join(ocispec.WorkspaceDir, req.WorkspaceSubdir)
	}
	return ocispec.WorkspaceDir
}

// run starts the session's command with `runsc exec` and relays it until
// it exits.
func (s *session) run(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) {
	c := s.c
	log := c.log.With("session_id", s.id)
	cwd := sessionCwd(req)
	u, err := c.sessionUser(req)
	if err != nil {
		refuse(s.conn, err)
		return
	}
	// runsc exec starts the command itself (no launcher process in the
	// sandbox); stderrGate and launchFailure give a command that cannot
	// run the shell's 127/126 and the product's message.
	pj, err := ocispec.ProcessJSON(ocispec.Process{Args: req.Argv, Env: s.env(req, u), Cwd: cwd, UID: u.UID, GID: u.GID, Rlimits: c.cfg.rlimits()})
	if err != nil {
		refuse(s.conn, errdefs.Mark(err, errdefs.ErrInvalid))
		return
	}
	pjFile := filepath.Join(c.sessionDir(), s.id+".json")
	if err := os.WriteFile(pjFile, pj, 0o600); err != nil {
		refuse(s.conn, err)
		return
	}
	defer os.Remove(pjFile)
	var inR, inW *os.File
	if req.Stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			refuse(s.conn, err)
			return
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		refuse(s.conn, err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		refuse(s.conn, err)
		return
	}
	pidFile := filepath.Join(c.sessionDir(), s.id+".pid")
	defer os.Remove(pidFile)
	argv := c.sb.Runtime().Exec(pjFile, pidFile, c.sb.Container())
	c.timing.Mark("session admitted; starting runsc exec")
	child, err := c.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "session_exec",
		ExecStop: true, // no wrapper re-exec of lazaret-hc on the session start path
		Target:   proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/", Files: []*os.File{inR, outW, errW}, Setsid: true},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			log.Debug("staged ownership", "slot", "session_exec", "identity", id.String())
			// The exec client waits at its exec stop: the command has not
			// run, and runs only after this.
			s.accept(joined)
			return nil
		},
	})
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		refuse(s.conn, fmt.Errorf("start session command: %w", err))
		return
	}
	s.setChild(child)
	s.relay(req, frames, joined, sessionStreams{
		proc: child, inW: inW, outR: outR, errR: errR,
		signal:   func(sig unix.Signal, group bool) { s.signalGuestPID(pidFile, sig, group) },
		launched: launchedByPIDFile(pidFile),
	})
}

// relay relays a started non-interactive session until its command exits.
func (s *session) relay(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool, ss sessionStreams) {
	c := s.c
	log := c.log.With("session_id", s.id)
	child, inW, outR, errR := ss.proc, ss.inW, ss.outR, ss.errR
	c.timing.Mark("session started")
	by := ss.by
	if by == "" {
		by = "runsc exec"
	}
	log.Info("session started", "argv0", req.Argv[0], "joined", joined, "by", by)
	idlemem.SettleSoon(log) // the start is done; HC goes back to relaying

	var outWG sync.WaitGroup
	send := func(stream lv1.Stream) func([]byte) {
		return func(b []byte) {
			s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: stream, Data: append([]byte(nil), b...)}}})
		}
	}
	gate := &stderrGate{write: send(lv1.Stream_STREAM_STDERR), launched: ss.launched}
	relay := func(r *os.File, out func([]byte)) {
		defer outWG.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				out(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	outWG.Add(2)
	go relay(outR, send(lv1.Stream_STREAM_STDOUT))
	go relay(errR, gate.Write)

	// Stdin is written by its own goroutine so a guest that does not read
	// cannot block signal delivery.
	stdinQ := make(chan []byte, 64)
	go func() {
		for b := range stdinQ {
			if inW == nil {
				continue
			}
			if b == nil {
				inW.Close()
				inW = nil
				continue
			}
			if _, err := inW.Write(b); err != nil {
				inW.Close()
				inW = nil
			}
		}
		if inW != nil {
			inW.Close()
		}
	}()
	// Group events (Interrupt, Quit, Suspend, Continue) are delivered in
	// order by one worker, through a bounded queue.
	groupQ := make(chan unix.Signal, groupSignalQueue)
	defer close(groupQ)
	go func() {
		for sig := range groupQ {
			ss.signal(sig, true)
		}
	}()
	clientGone := false
loop:
	for {
		select {
		case <-child.Done():
			break loop
		case f, ok := <-frames:
			if !ok {
				if !clientGone {
					clientGone = true
					log.Info("client connection lost: stopping the session command")
					go ss.signal(unix.SIGTERM, false)
					go func() {
						select {
						case <-child.Done():
						case <-time.After(closeGrace):
							child.Signal(unix.SIGKILL)
						}
					}()
				}
				frames = nil
				continue
			}
			switch {
			case f.GetStdin() != nil:
				if d := f.GetStdin().GetData(); len(d) > 0 {
					stdinQ <- d
				}
			case f.GetStdinClose() != nil:
				stdinQ <- nil
			case f.GetSignal() != nil:
				sig := unix.Signal(f.GetSignal().GetSignal())
				switch sig {
				case unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT:
					// Without a terminal, runsc exec forwards no signals:
					// deliver it to the exact guest process.
					go ss.signal(sig, false)
				default:
					log.Warn("refused signal from client", "signal", int(sig))
				}
			default:
				if sig, ok := groupEvent(f); ok {
					select {
					case groupQ <- sig:
					default:
						log.Warn("group signal dropped: queue full", "signal", unix.SignalName(sig))
					}
				}
			}
		}
	}
	close(stdinQ)
	st, werr := child.Status()
	// Drain output until EOF or a bounded deadline: a daemonized guest
	// process may keep the pipes open.
	drained := make(chan struct{})
	go func() { outWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	code, sig := st.ShellCode(), 0
	if !st.Exited {
		sig = int(st.Signal)
	}
	if werr != nil {
		code = 125
	}
	if held, launched := gate.Close(); !launched {
		if status, msg, ok := launchFailure(req.Argv[0], code, held); ok {
			log.Info("session command cannot run", "argv0", req.Argv[0], "status", status, "runsc", strings.TrimSpace(string(held)))
			code, held = status, []byte(msg)
		}
		if len(held) > 0 {
			gate.write(held)
		}
	}
	c.timing.Mark("session command exited")
	log.Info("session ended", "status", st.String(), "stopped", s.wasStopped())
	// Say so if it was the sandbox that stopped (a limit, a crash), and
	// report the command killed with it.
	if note, nc, ns, ok := c.sandboxStopNote(code, sig, s.wasStopped()); ok {
		s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: lv1.Stream_STREAM_STDERR, Data: []byte(note)}}})
		code, sig = nc, ns
	}
	c.leave(s)
	s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: int32(code), Signal: int32(sig), Stopped: s.wasStopped()}}})
}

// runscExecFailed is runsc exec's own failure status (it exits 128 when it
// cannot wait for the process, e.g. the sandbox died under it).
const runscExecFailed = 128

// groupSignalQueue bounds a non-interactive session's pending group events.
const groupSignalQueue = 8

// groupEvent maps the Interrupt, Quit, Suspend and Continue events to the
// signal for the session's guest process group.
func groupEvent(f *lv1.ClientFrame) (unix.Signal, bool) {
	switch {
	case f.GetInterrupt() != nil:
		return unix.SIGINT, true
	case f.GetQuit() != nil:
		return unix.SIGQUIT, true
	case f.GetSuspend() != nil:
		return unix.SIGTSTP, true
	case f.GetContinue() != nil:
		return unix.SIGCONT, true
	}
	return 0, false
}

// signalGuestPID delivers sig to the session's guest process, named by
// the pid runsc wrote with --internal-pid-file (a pid in the sandbox's own
// PID namespace: runsc resolves it there, never on the host), or with
// group to its process group: a `runsc exec` process leads its own process
// group (and session) in the sandbox, so the group ID is that pid.
func (s *session) signalGuestPID(pidFile string, sig unix.Signal, group bool) {
	c := s.c
	var pid int
	for i := 0; i < 50; i++ {
		if n, ok := runsc.ReadInternalPID(pidFile); ok {
			pid = n
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid <= 0 {
		c.log.Warn("no guest pid to signal", "session_id", s.id, "signal", unix.SignalName(sig))
		return
	}
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if group {
		c.runscQuiet(c.sb.Runtime().KillGroup(c.sb.Container(), name, pid))
		return
	}
	c.runscQuiet(c.sb.Runtime().KillPID(c.sb.Container(), name, pid))
}
