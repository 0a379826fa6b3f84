package sandboxinit

// The first session: the init starts a generation's first
// non-interactive session's command once the Domain is published, which
// saves the session a second `runsc exec` client (its process start costs
// the start-up tens of milliseconds of CPU on two busy cores). The Host
// Coordinator's requests and the init's reports travel over the socket the
// init has as ocispec.FirstSessionFD. The command gets what `runsc exec`
// would give it: its own session and process group, the session's user,
// working directory and environment, the init's capabilities and resource
// limits (the sandbox's process specification gives the init what a
// session's gives a session; a non-root user drops the capabilities at the
// exec), the coordinator's stdin, stdout and stderr descriptors as they are
// (passed with the start, as runsc exec passes its client's), and a launch
// failure reported like a shell's (127/126 and the product's message). A
// held start (ocispec.FirstSession.Held) is looked up at once and run on
// the coordinator's Go request, or dropped with its streams when the
// socket ends first.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ocispec"
)

// firstSession is the init's side of the first session. Its methods other
// than read run on the init's main goroutine.
type firstSession struct {
	conn    *net.UnixConn
	started bool
	held    *resolved // a held start, until Go or the socket's end
	pid     int       // the command's pid while it runs
}

// firstRequest is one coordinator request with the descriptors it carried;
// closed marks the socket's end (read's last).
type firstRequest struct {
	req    ocispec.FirstSessionRequest
	files  []*os.File
	closed bool
}

// resolved is a start whose command was looked up: what ForkExec runs, or
// the failure the command's start reports.
type resolved struct {
	file   string
	s      ocispec.FirstSession
	sys    *syscall.SysProcAttr
	files  []*os.File
	status int // non-zero: the start fails with msg on its stderr
	msg    string
}

// adoptFirstSession returns the first session's socket, nil when the init
// was given none.
func adoptFirstSession() *firstSession {
	fd := ocispec.FirstSessionFD
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil
	}
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "first-session")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lazaret-init: first-session socket: %v\n", err)
		return nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil
	}
	return &firstSession{conn: uc}
}

// read sends the coordinator's requests to requests until the socket
// ends. A malformed request is dropped (its descriptors closed).
func (f *firstSession) read(requests chan<- firstRequest) {
	buf := make([]byte, ocispec.FirstSessionMaxMessage)
	oob := make([]byte, unix.CmsgSpace(3*4))
	for {
		n, oobn, flags, _, err := f.conn.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			requests <- firstRequest{closed: true}
			return
		}
		files := receivedFiles(oob[:oobn])
		var r firstRequest
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || json.Unmarshal(buf[:n], &r.req) != nil || r.req.Version != ocispec.FirstSessionVersion {
			fmt.Fprintln(os.Stderr, "lazaret-init: a malformed first-session request dropped")
			closeFiles(files)
			continue
		}
		r.files = files
		if r.req.Start != nil {
			// Only signals follow, small ones: the init does not keep the
			// start's buffer for the session's life.
			buf = make([]byte, 512)
		}
		requests <- r
	}
}

// receivedFiles are the descriptors of SCM_RIGHTS messages in oob.
func receivedFiles(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "first-session-stream"))
		}
	}
	return files
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// handle serves one request.
func (f *firstSession) handle(r firstRequest) {
	switch {
	case r.closed:
		// The coordinator is gone, or gave the held start up: it never runs.
		if f.held != nil {
			closeFiles(f.held.files)
			f.held = nil
		}
	case r.req.Start != nil:
		f.start(*r.req.Start, r.files)
	case r.req.Go:
		closeFiles(r.files)
		if h := f.held; h != nil {
			f.held = nil
			f.run(h)
		}
	case r.req.Signal > 0 && r.req.Signal < 65:
		closeFiles(r.files)
		if f.pid > 0 {
			target := f.pid
			if r.req.Group {
				target = -f.pid
			}
			unix.Kill(target, unix.Signal(r.req.Signal))
		}
	default:
		closeFiles(r.files)
	}
}

// start starts the command with the passed stdin, stdout and stderr, or,
// held, resolves it and keeps it for the Go request. Only the first start
// is served.
func (f *firstSession) start(s ocispec.FirstSession, files []*os.File) {
	if f.started || len(files) != 3 {
		closeFiles(files)
		fmt.Fprintln(os.Stderr, "lazaret-init: a first-session start without its three streams, or a second one, refused")
		return
	}
	f.started = true
	r := resolve(s, files)
	if s.Held {
		f.held = r
		return
	}
	f.run(r)
}

// resolve looks up s's command and checks what it runs as.
func resolve(s ocispec.FirstSession, files []*os.File) *resolved {
	r := &resolved{s: s, files: files}
	if len(s.Args) == 0 || !path.IsAbs(s.Cwd) {
		r.status, r.msg = ExitNotFound, "lazaret: the session's command is malformed\n"
		return r
	}
	argv0 := s.Args[0]
	if r.file, r.status, r.msg = lookPathIn(argv0, envValue(s.Env, "PATH"), s.Cwd); r.status != 0 {
		return r
	}
	r.sys = &syscall.SysProcAttr{Setsid: true}
	if os.Geteuid() == 0 {
		// The init is the sandbox's root: the command runs as the
		// session's user, with no supplementary groups (as runsc exec
		// starts a process document's).
		r.sys.Credential = &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: []uint32{}}
	} else if uint32(os.Geteuid()) != s.UID || uint32(os.Getegid()) != s.GID {
		// Only this package's tests run it as another user.
		r.status, r.msg = ExitNotExecutable, fmt.Sprintf("lazaret: %s: cannot run as %d:%d\n", argv0, s.UID, s.GID)
	}
	return r
}

// run starts a resolved command (or reports why it cannot start).
func (f *firstSession) run(r *resolved) {
	defer closeFiles(r.files)
	stderr := r.files[2]
	if r.status != 0 {
		f.fail(stderr, r.status, r.msg)
		return
	}
	pid, err := syscall.ForkExec(r.file, r.s.Args, &syscall.ProcAttr{
		Dir:   r.s.Cwd,
		Env:   r.s.Env,
		Files: []uintptr{r.files[0].Fd(), r.files[1].Fd(), r.files[2].Fd()},
		Sys:   r.sys,
	})
	if err != nil {
		status, msg := execFailure(r.s.Args[0], err)
		f.fail(stderr, status, msg)
		return
	}
	f.pid = pid
	f.report(ocispec.FirstSessionReport{Pid: pid})
}

// fail reports a command that could not start: msg on its stderr and
// status as its exit.
func (f *firstSession) fail(stderr *os.File, status int, msg string) {
	io.WriteString(stderr, msg)
	f.report(ocispec.FirstSessionReport{Exited: true, Code: status})
}

// report sends one report to the coordinator.
func (f *firstSession) report(r ocispec.FirstSessionReport) {
	r.Version = ocispec.FirstSessionVersion
	b, _ := json.Marshal(r)
	if _, err := f.conn.Write(b); err != nil {
		fmt.Fprintf(os.Stderr, "lazaret-init: first-session report: %v\n", err)
	}
}

// exited reports whether the command was started (or refused) and is
// over; a held start is not.
func (f *firstSession) exited() bool { return f.started && f.held == nil && f.pid == 0 }

// reaped reports the command's exit when pid is its pid.
func (f *firstSession) reaped(pid int, ws unix.WaitStatus) {
	if f == nil || pid <= 0 || pid != f.pid {
		return
	}
	f.pid = 0
	r := ocispec.FirstSessionReport{Exited: true, Code: ws.ExitStatus()}
	if ws.Signaled() {
		r.Code, r.Signal = 0, int(ws.Signal())
	}
	f.report(r)
}

// lookPathIn resolves argv0 as a shell would with PATH pathEnv, relative
// to cwd, and returns the file to execute, or a shell's status (127 not
// found, 126 not executable) and the message for the session's stderr.
// The check is the init's (root's) own access; a command the session's
// user may not execute fails at the exec instead, with the same status.
func lookPathIn(argv0, pathEnv, cwd string) (file string, status int, msg string) {
	abs := func(p string) string {
		if path.IsAbs(p) {
			return p
		}
		return path.Join(cwd, p)
	}
	var candidates []string
	if strings.Contains(argv0, "/") {
		candidates = []string{argv0}
	} else {
		for _, dir := range strings.Split(pathEnv, ":") {
			if dir == "" {
				dir = "."
			}
			candidates = append(candidates, path.Join(dir, argv0))
		}
	}
	denied := false
	for _, c := range candidates {
		switch err := executable(abs(c)); {
		case err == nil:
			return abs(c), 0, ""
		case errors.Is(err, fs.ErrPermission):
			denied = true
		}
	}
	status, msg = lookupFailure(argv0, denied)
	return "", status, msg
}

// executable reports whether p is an executable file (fs.ErrPermission:
// it exists but is not; fs.ErrNotExist: it does not).
func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fs.ErrPermission
	}
	if err := unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS); err != nil {
		return fs.ErrPermission
	}
	return nil
}

// envValue is the value of name in env (the last entry wins, as runsc
// keeps it), "" if none.
func envValue(env []string, name string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == name {
			v = val
		}
	}
	return v
}
