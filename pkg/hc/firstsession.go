package hc

// The first session: a generation's first non-interactive Client Session
// (normally the starting CLI's) is started by the sandbox's init once the
// Domain is published, instead of by a second `runsc exec` client, whose
// process start (a runsc client, tens of milliseconds of CPU on two busy
// cores) the cold start then does not pay. The slot goes to the first
// such session admitted, before or after the publication: on a loaded
// host the starting CLI's session can arrive after it, and then joins
// the running generation through the init all the same. Every later
// session, and every interactive one, attaches with `runsc exec`.
//
// The coordinator creates a SOCK_SEQPACKET socket pair before it spawns
// the Runtime Supervisor, which passes one end to the attached runsc as the
// init's descriptor ocispec.FirstSessionFD. Over it the coordinator sends
// the start (the command, with the session's stdin, stdout and stderr
// descriptors as SCM_RIGHTS, which the command gets as they are, as `runsc
// exec` passes its client's) and signals. A session admitted before the
// publication sends its start held once the sandbox is ready (holdFirst),
// so that the init looks the command up while the Domain is published,
// and starts it with a Go request once published (goFirst); given up
// (cancel), the socket closes and the init drops it. The init reports
// the command's pid and its exit status, which it reaps. The session keeps
// everything a `runsc exec` session has: its streams end when every writer
// in the sandbox closed them, signals reach its process and process group,
// its exit status is the command's, and it ends when the Domain stops.

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// firstSlot is a generation's first-session socket, used by at most one
// session.
type firstSlot struct {
	mu      sync.Mutex
	claimed bool
	conn    *net.UnixConn // the coordinator's end
	// theirs is the init's end, handed to the Runtime Supervisor's spawn
	// (which closes it).
	theirs *os.File
}

// newFirstSlot creates the socket pair.
func newFirstSlot() (*firstSlot, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "first-session")
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	return &firstSlot{conn: c.(*net.UnixConn), theirs: os.NewFile(uintptr(fds[1]), "first-session")}, nil
}

// claim gives the slot to one session, once; false when it is taken (or
// there is none).
func (f *firstSlot) claim() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.claimed {
		return false
	}
	f.claimed = true
	return true
}

// close closes the coordinator's end (teardown): a command still running
// is ended with the sandbox.
func (f *firstSlot) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimed = true
	f.conn.Close()
}

// send writes one request with the descriptors files.
func (f *firstSlot) send(r ocispec.FirstSessionRequest, files ...*os.File) error {
	r.Version = ocispec.FirstSessionVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > ocispec.FirstSessionMaxMessage {
		return errFirstTooLarge
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, file := range files {
			fds[i] = int(file.Fd()) // blocking, as the command expects its streams
		}
		oob = unix.UnixRights(fds...)
	}
	f.conn.SetWriteDeadline(time.Now().Add(closeGrace))
	_, _, err = f.conn.WriteMsgUnix(b, oob, nil)
	return err
}

// errFirstTooLarge: the start does not fit one message (an environment of
// that size); the session attaches with runsc exec instead.
var errFirstTooLarge = errors.New("the first session's start exceeds one message")

// firstProcess is the first session's command as the coordinator sees
// it: a sessionProcess whose status the init reports.
type firstProcess struct {
	slot *firstSlot
	done chan struct{}
	mu   sync.Mutex
	st   pidfs.ExitStatus
	over bool
}

// reports reads the init's reports until the command's exit, or until the
// socket ends (the sandbox is gone): then the command is reported killed.
// onStart runs at the report of the command's start.
func (p *firstProcess) reports(onStart func()) {
	buf := make([]byte, 512)
	for {
		n, err := p.slot.conn.Read(buf)
		if err != nil || n == 0 {
			p.finish(pidfs.ExitStatus{Signal: unix.SIGKILL})
			return
		}
		var r ocispec.FirstSessionReport
		if json.Unmarshal(buf[:n], &r) != nil || r.Version != ocispec.FirstSessionVersion {
			continue // not the init's; a well-formed report still comes
		}
		if r.Exited {
			p.finish(pidfs.ExitStatus{Exited: r.Signal == 0, Code: r.Code, Signal: unix.Signal(r.Signal)})
			return
		}
		if r.Pid > 0 {
			// The coordinator acts on the command only through the
			// init, which knows its pid: the report marks the start.
			onStart()
		}
	}
}

// finish records the command's status, once.
func (p *firstProcess) finish(st pidfs.ExitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over {
		return
	}
	p.over, p.st = true, st
	close(p.done)
}

// Done is closed once the command exited (or was given up with the
// Domain, see Signal).
func (p *firstProcess) Done() <-chan struct{} { return p.done }

// Status is the command's status once Done.
func (p *firstProcess) Status() (pidfs.ExitStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st, nil
}

// Signal delivers sig to the command through the init. A SIGKILL ends the
// session (teardown, `lazaret stop`, a client gone past its grace): if the
// init's report does not come within closeGrace, or the init cannot be
// reached, the command is reported killed.
func (p *firstProcess) Signal(sig unix.Signal) error {
	err := p.signal(sig, false)
	if sig == unix.SIGKILL {
		if err != nil {
			p.finish(pidfs.ExitStatus{Signal: unix.SIGKILL})
			return err
		}
		go func() {
			select {
			case <-p.done:
			case <-time.After(closeGrace):
				p.finish(pidfs.ExitStatus{Signal: unix.SIGKILL})
			}
		}()
	}
	return err
}

// signal asks the init to deliver sig to the command or its group.
func (p *firstProcess) signal(sig unix.Signal, group bool) error {
	return p.slot.send(ocispec.FirstSessionRequest{Signal: int(sig), Group: group})
}

// firstStart is a session's start as sent to the init, with the
// coordinator's ends of its streams.
type firstStart struct {
	p               *firstProcess
	inW, outR, errR *os.File
}

// sendFirst sends the session's start to the init (held: resolved there,
// run on goFirst's Go) with the guest's ends of its streams; accept, when
// not nil, runs just before the send. It returns nil, having started
// nothing, when the start cannot be sent, and refused when it refused the
// session.
func (s *session) sendFirst(req *lv1.RunRequest, held bool, accept func()) (st *firstStart, refused bool) {
	c := s.c
	// A held start that cannot be made is left to the start at the
	// publication, which refuses the session if it still cannot.
	fail := func(err error) (*firstStart, bool) {
		if held {
			c.log.Warn("first session's start not held in the sandbox's init", "session_id", s.id, "err", err)
			return nil, false
		}
		refuse(s.conn, err)
		return nil, true
	}
	cwd := sessionCwd(req)
	u, err := c.sessionUser(req)
	if err != nil {
		return fail(err)
	}
	// The guest's ends of the streams go to the init with the start; a
	// session without stdin reads /dev/null, as runsc exec's would.
	var inR, inW *os.File
	if req.Stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			return fail(err)
		}
	} else if inR, err = os.Open(os.DevNull); err != nil {
		return fail(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		if inW != nil {
			inW.Close()
		}
		return fail(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		if inW != nil {
			inW.Close()
		}
		outR.Close()
		outW.Close()
		return fail(err)
	}
	st = &firstStart{p: &firstProcess{slot: c.first, done: make(chan struct{})}, inW: inW, outR: outR, errR: errR}
	start := ocispec.FirstSession{Held: held, Args: req.Argv, Env: s.env(req, u), Cwd: cwd, UID: uint32(u.UID), GID: uint32(u.GID)}
	if accept != nil {
		accept()
	}
	err = c.first.send(ocispec.FirstSessionRequest{Start: &start}, inR, outW, errW)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		st.close()
		c.log.Warn("first session not started by the init: attaching with runsc exec", "session_id", s.id, "held", held, "err", err)
		return nil, false
	}
	return st, false
}

// close closes the coordinator's ends of the streams.
func (st *firstStart) close() {
	if st.inW != nil {
		st.inW.Close()
	}
	st.outR.Close()
	st.errR.Close()
}

// cancel gives a held start up (the session ends before the publication,
// or the generation failed): the first-session socket closes, so that the
// init drops the start, which never runs, and later sessions attach with
// runsc exec. No-op on nil.
func (st *firstStart) cancel() {
	if st == nil {
		return
	}
	st.p.slot.close()
	st.close()
}

// holdFirst, once the sandbox is ready, claims the generation's
// first-session slot for s and sends its start held; nil when the slot is
// taken or the start was not sent (the session then starts as any other
// once the Domain is published). A session whose user is refused is not
// held: it is refused after the publication, as before.
func (s *session) holdFirst(req *lv1.RunRequest) *firstStart {
	if _, err := s.c.sessionUser(req); err != nil || !s.c.first.claim() {
		return nil
	}
	st, _ := s.sendFirst(req, true, nil)
	if st != nil {
		s.c.timing.Mark("first session's start held in the sandbox's init")
		failpoint.Hit("lazaret-hc:first-session-held")
	}
	return st
}

// goFirst starts a held start once the Domain is published, and relays it
// as runFirst does. False, having started nothing, when the Go cannot be
// sent (the session then attaches with runsc exec).
func (s *session) goFirst(st *firstStart, req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) bool {
	c := s.c
	c.timing.Mark("session admitted; starting it in the sandbox's init")
	// As runFirst: the CLI hears Accepted before the init may start the
	// command.
	s.accept(joined)
	if err := c.first.send(ocispec.FirstSessionRequest{Go: true}); err != nil {
		c.log.Warn("first session's held start not started by the init: attaching with runsc exec", "session_id", s.id, "err", err)
		st.cancel()
		return false
	}
	s.relayFirst(st, req, frames, joined)
	return true
}

// runFirst runs a non-interactive session as the generation's first
// session (claimed from the slot): the init starts its command, and it is
// relayed as a `runsc exec` session is. It returns false, having started
// nothing, when the start cannot be sent (the session then attaches with
// runsc exec).
func (s *session) runFirst(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) bool {
	st, refused := s.sendFirst(req, false, func() {
		s.c.timing.Mark("session admitted; starting it in the sandbox's init")
		// The init starts the command once it reads the request, even if
		// this coordinator is gone by then: the CLI hears Accepted first
		// (session.accept).
		s.accept(joined)
	})
	if refused {
		return true
	}
	if st == nil {
		return false
	}
	s.relayFirst(st, req, frames, joined)
	return true
}

// relayFirst relays a started first session until it ends.
func (s *session) relayFirst(st *firstStart, req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) {
	c := s.c
	failpoint.Hit("lazaret-hc:first-session-requested")
	p := st.p
	s.setChild(p)
	go p.reports(func() { c.timing.Mark("session command started by the sandbox's init") })
	s.relay(req, frames, joined, sessionStreams{
		proc: p, inW: st.inW, outR: st.outR, errR: st.errR, by: "init",
		signal: func(sig unix.Signal, group bool) {
			if err := p.signal(sig, group); err != nil {
				c.log.Warn("signal to the first session", "session_id", s.id, "signal", unix.SignalName(sig), "err", err)
			}
		},
		// The init reports a command it cannot start itself.
		launched: func() bool { return true },
	})
}

// startFirst is runFirst when the session may take the generation's
// first-session slot; false if it did not (it attaches with runsc exec).
func (s *session) startFirst(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) bool {
	if !s.c.first.claim() {
		return false
	}
	return s.runFirst(req, frames, joined)
}
