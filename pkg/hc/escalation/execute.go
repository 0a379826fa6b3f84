package escalation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/mailbox"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
)

// hostEnv is the documented minimal environment of a host command.
func (e *Service) hostEnv(id string) []string {
	env := []string{"PATH=" + escHostPath, "LANG=C.UTF-8", "TERM=dumb", "LAZARET_ESCALATION_ID=" + id, "LAZARET_DOMAIN_ID=" + e.gen.DomainID}
	if e.home != "" {
		env = append(env, "HOME="+e.home)
	}
	if e.user != "" {
		env = append(env, "USER="+e.user, "LOGNAME="+e.user)
	}
	return env
}

// lookPath resolves the program without a shell: a name is searched in
// escHostPath and an absolute path used as given (host paths the developer
// approved); a relative path is opened beneath the held working directory
// without following any symlink and executed through that descriptor, so
// the sandbox cannot swap it between the check and the exec. A relative
// script is refused (through a descriptor its interpreter would see $0 as
// /proc/self/fd/N): run it through its interpreter. prog is the path to
// execute; held, when not nil, is the descriptor it names and must stay
// open until the child has executed.
func lookPath(prog string, dir *os.File) (path string, held *os.File, err error) {
	check := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	switch {
	case filepath.IsAbs(prog):
		if check(prog) {
			return prog, nil, nil
		}
		return "", nil, errdefs.New(errdefs.ErrInvalid, "%s is not an executable file on the host", record.EscapeText(prog))
	case strings.Contains(prog, "/"):
		f, err := mailbox.FileBeneath(dir, filepath.Clean(prog))
		if err != nil {
			return "", nil, err
		}
		head := make([]byte, 4)
		n, _ := f.ReadAt(head, 0)
		if n != 4 || string(head) != "\x7fELF" {
			f.Close()
			return "", nil, errdefs.New(errdefs.ErrInvalid, "%s is not an executable binary: a program given by a relative path runs only through its descriptor, which a script's interpreter cannot use; ask for `sh %s` (or its interpreter) instead", record.EscapeText(prog), record.EscapeText(prog))
		}
		return mailbox.HeldPath(f), f, nil
	}
	for _, d := range strings.Split(escHostPath, ":") {
		if p := filepath.Join(d, prog); check(p) {
			return p, nil, nil
		}
	}
	return "", nil, errdefs.New(errdefs.ErrInvalid, "%s was not found in the host PATH %s", record.EscapeText(prog), escHostPath)
}

// hostRoute is StartHostExecution's terminal side. For an interactive
// session the terminal loop switches the route to HostProcess — its PTY is
// no longer read, no input, resize or signal event reaches the sandbox —
// and tells the CLI, before the process may run; a session that is closing
// (or whose client or PTY is lost) starts none. It returns the run (nil for
// a session without a terminal) or, when the process must not start, the
// result to answer.
func (e *Service) hostRoute(s *session, r *request, argv []string, by string) (*HostRun, *lv1.EscalationResult) {
	if h := e.Hooks.BeforeHostRoute; h != nil {
		h(r.id())
	}
	refuse := func(o lv1.EscalationOutcome, reason string) *lv1.EscalationResult {
		return &lv1.EscalationResult{Outcome: o, ExitCode: -1, Reason: reason, ApprovedArgv: argv}
	}
	port := e.awaitPort(s, r)
	if port == nil {
		select {
		case <-s.gone:
			return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
		case <-r.cancel:
			return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
		default:
		}
		if e.interactive(s.id) {
			return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session's terminal is not available")
		}
		return nil, nil // no terminal: no route to hold
	}
	cwd := ocispec.WorkspaceDir
	if r.req.Cwd != "" {
		cwd += "/" + r.req.Cwd
	}
	run := newHostRun(&lv1.HostProcessStarted{RequestId: r.id(), Argv: argv, Cwd: cwd, DecidedBy: by})
	select {
	case port.hosts <- run:
	case <-port.closed:
		return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "the session closed before the host command started")
	case <-s.gone:
		return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
	case <-r.cancel:
		return nil, refuse(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
	}
	<-run.routed // the loop closes it as soon as the route is HostProcess
	return run, nil
}

type escOutput struct {
	stream lv1.EscalationStream
	data   []byte
	eof    bool
}

// execute is StartHostExecution … CompleteHostExecution / FailHostExecution
// / CancelRequest / TimeoutRequest: the approved argv runs with execve
// through the causal broker; output is chunked back with at most
// record.MaxUnacked unacknowledged chunks (the pipes are not read beyond
// that); cancellation, session loss and the acknowledgement timeout kill
// and reap the exact process before the result is written.
func (e *Service) execute(s *session, r *request, argv []string, by string) {
	log := e.log.With("request_id", r.id(), "session_id", s.id)
	failed := func(reason string) {
		e.mtHostFailed(r)
		e.writeResult(r, &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, ExitCode: -1, Reason: reason, ApprovedArgv: argv}, 0, argv)
	}
	// The working directory is held open and the child enters it through
	// the descriptor (HeldPath): a symlink swapped in after the check moves
	// nothing out of the workspace.
	held, err := mailbox.DirBeneath(e.workspace, r.req.Cwd)
	if err != nil {
		failed(err.Error())
		return
	}
	defer held.Close()
	dir := held.Name()
	prog, progFile, err := lookPath(argv[0], held)
	if err != nil {
		failed(err.Error())
		return
	}
	if progFile != nil {
		defer progFile.Close()
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		failed(err.Error())
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		failed(err.Error())
		return
	}
	// StartHostExecution: an interactive session's route is HostProcess
	// before the process may run, and a closing session starts none.
	run, refused := e.hostRoute(s, r, argv, by)
	e.mtHostRouted(r, refused)
	if refused != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		log.Info("host command not started", "reason", refused.Reason)
		e.writeResult(r, refused, 0, argv)
		return
	}
	defer run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, -1, 0, "the host execution ended") // if not reported below
	stopC := run.stopC()
	t0 := time.Now()
	child, err := e.cfg.Launcher.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "escalation_exec",
		ExecStop: true, // no wrapper re-exec of this binary per command
		Target:   proc.Command{Path: prog, Args: argv, Env: e.hostEnv(r.id()), Dir: mailbox.HeldPath(held), Files: []*os.File{nil, outW, errW}, Setsid: true},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			select {
			case <-stopC: // stopped before its first instruction
				return errdefs.Mark(fmt.Errorf("%w: %s", errHostStopped, run.stopWhy), errdefs.ErrRefused)
			default:
			}
			return e.audit.Append(audit.Entry{Event: audit.EventExecute, Generation: e.gen.Generation, RequestID: r.id(), SessionID: s.id, Argv: argv, Cwd: dir, Process: id.String(), DecidedBy: by})
		},
	})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if errors.Is(err, errHostStopped) {
			log.Info("host command not started", "reason", run.stopWhy)
			e.mtHostStopped(r)
			e.writeResult(r, &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, ExitCode: -1, Reason: run.stopWhy, ApprovedArgv: argv}, 0, argv)
			run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, -1, 0, run.stopWhy)
			return
		}
		reason := fmt.Sprintf("start %s: %v", record.EscapeText(argv[0]), err)
		failed(reason)
		run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, -1, 0, reason)
		return
	}
	t1 := time.Now()
	if h := e.Hooks.HostStarted; h != nil {
		h(r.id(), child)
	}
	log.Info("host command started", "program", prog, "identity", child.Identity().String(), "decide_us", t0.Sub(r.recv).Microseconds(), "acquire_us", t1.Sub(t0).Microseconds())
	var t2 time.Time
	outC := make(chan escOutput)
	quit := make(chan struct{})
	reader := func(f *os.File, st lv1.EscalationStream) {
		defer f.Close()
		for {
			buf := make([]byte, record.MaxChunkData)
			n, err := f.Read(buf)
			if n > 0 {
				select {
				case outC <- escOutput{stream: st, data: buf[:n]}:
				case <-quit:
					return
				}
			}
			if err != nil {
				select {
				case outC <- escOutput{stream: st, eof: true}:
				case <-quit:
				}
				return
			}
		}
	}
	go reader(outR, lv1.EscalationStream_ESCALATION_STREAM_STDOUT)
	go reader(errR, lv1.EscalationStream_ESCALATION_STREAM_STDERR)
	defer close(quit)

	var seq, acked, total uint64
	eofs := 0
	childDone := child.Done()
	exited := false
	var drainDeadline <-chan time.Time
	cancelC := r.cancel
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	kill := func(outcome lv1.EscalationOutcome, reason string) {
		// The whole process group the command leads (Setsid), through its
		// pidfd: a shell's children die with it rather than outlive the
		// request (and its session).
		e.mtHostKilled(r, outcome)
		child.SignalGroup(unix.SIGKILL)
		child.Signal(unix.SIGKILL)
		<-child.Done() // reaped by the broker through the pidfd
		outR.Close()
		errR.Close()
		for i := acked + 1; i <= seq; i++ {
			r.dir.Remove(escalate.ChunkName(i))
		}
		log.Info("host command stopped", "reason", reason)
		e.writeResult(r, &lv1.EscalationResult{Outcome: outcome, ExitCode: -1, Signal: int32(unix.SIGKILL), Reason: reason, LastSequence: 0, ApprovedArgv: argv}, total, argv)
		// Only now (killed, reaped, audited, answered) may the terminal
		// route return to the sandbox.
		run.finish(outcome, -1, int32(unix.SIGKILL), reason)
	}
	for {
		if exited && eofs == 2 && acked == seq {
			break
		}
		var takeC <-chan escOutput
		if eofs < 2 && seq-acked < record.MaxUnacked {
			takeC = outC
		}
		select {
		case o := <-takeC:
			if o.eof {
				eofs++
				continue
			}
			seq++
			total += uint64(len(o.data))
			b, err := record.Seal(record.KindChunk, &lv1.ResultChunk{RequestId: r.id(), Generation: e.gen.Generation, Sequence: seq, Stream: o.stream, Data: o.data}, e.anchor.SignAsCoordinator)
			if err == nil {
				err = r.dir.Publish(escalate.ChunkName(seq), b)
			}
			if err != nil {
				kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "publish result chunk: "+err.Error())
				return
			}
		case <-r.ackNote:
			a := r.ackSeq.Load()
			if a > seq {
				kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "acknowledgement of an unsent chunk")
				return
			}
			for i := acked + 1; i <= a; i++ {
				r.dir.Remove(escalate.ChunkName(i))
			}
			acked = max(acked, a)
		case <-childDone:
			childDone, exited, t2 = nil, true, time.Now()
			drainDeadline = time.After(e.cfg.DrainTimeout)
			// CompleteHostExecution: the process is gone, the route is
			// the sandbox route again (its output may still be draining
			// to the requester).
			st, _ := child.Status()
			e.mtHostExited(r)
			if st.Exited {
				run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED, int32(st.Code), 0, "")
			} else {
				run.finish(lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED, -1, int32(st.Signal), "")
			}
		case <-drainDeadline:
			// A daemonized descendant keeps the pipes open: stop reading.
			outR.Close()
			errR.Close()
			drainDeadline = nil
		case <-cancelC:
			if exited {
				cancelC = nil
				continue
			}
			kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, "cancelled by the requester")
			return
		case <-stopC:
			// The developer cancelled at the session's terminal, or the
			// session is closing (its close handshake waits for this).
			if exited {
				stopC = nil
				continue
			}
			kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED, run.stopWhy)
			return
		case <-s.gone:
			kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, "the session ended")
			return
		case <-tick.C:
			if time.Since(time.Unix(0, r.lastAck.Load())) > escAckTimeout {
				kill(lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT, "the requester stopped acknowledging")
				return
			}
		}
	}
	st, werr := child.Status()
	log.Info("host command ended", "status", st.String(), "run_us", t2.Sub(t1).Microseconds(), "drain_us", time.Since(t2).Microseconds(), "chunks", seq, "bytes", total)
	res := &lv1.EscalationResult{Outcome: lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED, ExitCode: int32(st.Code), LastSequence: seq, ApprovedArgv: argv}
	if !st.Exited {
		res.ExitCode, res.Signal = -1, int32(st.Signal)
	}
	if werr != nil {
		res.Outcome, res.Reason = lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED, werr.Error()
	}
	e.writeResult(r, res, total, argv)
}
