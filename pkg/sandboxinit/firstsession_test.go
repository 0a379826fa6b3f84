package sandboxinit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ocispec"
)

// firstSessionEnv makes this test binary serve the first session as the
// init does: its socket is descriptor 3; it handles requests and reaps
// until its stdin ends.
const firstSessionEnv = "LAZARET_TEST_FIRST_SESSION"

func init() {
	if os.Getenv(firstSessionEnv) != "1" {
		return
	}
	f := adoptFirstSession()
	if f == nil {
		fmt.Fprintln(os.Stderr, "no first-session socket")
		os.Exit(2)
	}
	requests := make(chan firstRequest, 4)
	go f.read(requests)
	chld := make(chan os.Signal, 8)
	signal.Notify(chld, unix.SIGCHLD)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	for {
		select {
		case <-eof:
			os.Exit(0)
		case r := <-requests:
			f.handle(r)
		case <-chld:
			reap(f.reaped)
		}
	}
}

// initUnderTest is this test binary serving a first session, and the
// coordinator's end of its socket.
type initUnderTest struct {
	conn *net.UnixConn
}

func startInit(t *testing.T) *initUnderTest {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	c := exec.Command(exe, "-test.run=^$")
	c.Env = []string{firstSessionEnv + "=1", "PATH=/usr/bin:/bin"}
	c.ExtraFiles = []*os.File{theirs} // descriptor 3
	c.Stderr = os.Stderr
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		conn.Close()
		c.Wait()
	})
	return &initUnderTest{conn: conn.(*net.UnixConn)}
}

func (i *initUnderTest) send(t *testing.T, r ocispec.FirstSessionRequest, files ...*os.File) {
	t.Helper()
	r.Version = ocispec.FirstSessionVersion
	b, _ := json.Marshal(r)
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for k, f := range files {
			fds[k] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := i.conn.WriteMsgUnix(b, oob, nil); err != nil {
		t.Fatal(err)
	}
}

func (i *initUnderTest) report(t *testing.T) ocispec.FirstSessionReport {
	t.Helper()
	i.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, err := i.conn.Read(buf)
	if err != nil {
		t.Fatalf("no report from the init: %v", err)
	}
	var r ocispec.FirstSessionReport
	if err := json.Unmarshal(buf[:n], &r); err != nil || r.Version != ocispec.FirstSessionVersion {
		t.Fatalf("report %q: %v", buf[:n], err)
	}
	return r
}

// streams are a session's streams: the guest's ends (sent with the
// start) and the coordinator's.
type streams struct {
	inR, inW, outR, outW, errR, errW *os.File
}

func newStreams(t *testing.T) *streams {
	t.Helper()
	var s streams
	var err error
	for _, p := range []struct{ r, w **os.File }{{&s.inR, &s.inW}, {&s.outR, &s.outW}, {&s.errR, &s.errW}} {
		if *p.r, *p.w, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
	}
	return &s
}

// sent closes the coordinator's copies of the guest's ends once sent.
func (s *streams) sent() {
	s.inR.Close()
	s.outW.Close()
	s.errW.Close()
}

// readAll reads f to its end within a bound.
func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	f.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v (so far %q)", f.Name(), err, b)
	}
	return string(b)
}

func self() (uint32, uint32) { return uint32(os.Geteuid()), uint32(os.Getegid()) }

// TestFirstSessionStreams: the command gets the passed stdin, stdout and
// stderr as they are; they end when every writer is done (a background
// writer after the command's exit included), as a runsc exec client's
// would; the init reports the start and the exit status.
func TestFirstSessionStreams(t *testing.T) {
	uid, gid := self()
	dir := t.TempDir()
	in := startInit(t)
	s := newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: &ocispec.FirstSession{
		Args: []string{"sh", "-c", `echo out; echo err >&2; read x; echo "got $x in $(pwd)"; (sleep 0.3; echo late; echo late-err >&2) & exit 3`},
		Env:  []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: uid, GID: gid,
	}}, s.inR, s.outW, s.errW)
	s.sent()
	if r := in.report(t); r.Pid <= 0 || r.Exited {
		t.Fatalf("first report %+v, want the start", r)
	}
	s.inW.Write([]byte("hello\n"))
	s.inW.Close()
	if r := in.report(t); !r.Exited || r.Code != 3 || r.Signal != 0 {
		t.Fatalf("report %+v, want exit status 3", r)
	}
	if out := readAll(t, s.outR); out != "out\ngot hello in "+dir+"\nlate\n" {
		t.Errorf("stdout %q", out)
	}
	if errs := readAll(t, s.errR); errs != "err\nlate-err\n" {
		t.Errorf("stderr %q", errs)
	}
}

// TestFirstSessionCannotStart: a command that is not found or not
// executable is reported like a shell's (127/126, the product's message
// on stderr), with no start reported.
func TestFirstSessionCannotStart(t *testing.T) {
	uid, gid := self()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "noexec.sh"), []byte("#!/bin/sh\necho ran\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "blob"), []byte("not a program\x00\x01"), 0o755)
	for _, c := range []struct {
		argv0  string
		status int
		stderr string
	}{
		{"no-such-command-xyz", 127, "lazaret: no-such-command-xyz: command not found in the sandbox\n"},
		{"/no/such/path", 127, "lazaret: /no/such/path: command not found in the sandbox\n"},
		{"./noexec.sh", 126, "lazaret: ./noexec.sh: permission denied\n"},
		{dir, 126, "lazaret: " + dir + ": permission denied\n"},
		{"./blob", 126, "lazaret: ./blob: exec format error\n"},
	} {
		in := startInit(t)
		s := newStreams(t)
		in.send(t, ocispec.FirstSessionRequest{Start: &ocispec.FirstSession{Args: []string{c.argv0}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: uid, GID: gid}}, s.inR, s.outW, s.errW)
		s.sent()
		if r := in.report(t); !r.Exited || r.Code != c.status || r.Pid != 0 {
			t.Errorf("%s: report %+v, want exit status %d and no start", c.argv0, r, c.status)
		}
		if out := readAll(t, s.outR); out != "" {
			t.Errorf("%s: stdout %q", c.argv0, out)
		}
		if errs := readAll(t, s.errR); errs != c.stderr {
			t.Errorf("%s: stderr %q, want %q", c.argv0, errs, c.stderr)
		}
	}
}

// TestFirstSessionRefusesBadRequests: a start without its three streams
// and a malformed or other-version message start nothing; the
// well-formed start after them runs; a second start is refused.
func TestFirstSessionRefusesBadRequests(t *testing.T) {
	uid, gid := self()
	in := startInit(t)
	cmd := &ocispec.FirstSession{Args: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/", UID: uid, GID: gid}
	s := newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: cmd}, s.inR, s.outW) // two streams only
	in.conn.Write([]byte("not json"))
	in.conn.Write([]byte(`{"version":1,"start":{"args":["true"],"cwd":"/"}}`))
	s2 := newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: cmd}, s2.inR, s2.outW, s2.errW)
	s2.sent()
	if r := in.report(t); r.Pid <= 0 {
		t.Fatalf("report %+v, want the well-formed start's", r)
	}
	if r := in.report(t); !r.Exited || r.Code != 0 {
		t.Fatalf("report %+v, want its exit", r)
	}
	s3 := newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: cmd}, s3.inR, s3.outW, s3.errW)
	s3.sent()
	in.conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := in.conn.Read(make([]byte, 512)); err == nil {
		t.Fatalf("a report (%d bytes) for a second start", n)
	}
	if out := readAll(t, s3.outR); out != "" {
		t.Errorf("second start's stdout %q", out)
	}
}

// TestFirstSessionHeldStart (FirstSession.Held): a held start runs
// nothing until the Go request, then starts as any start; a command that
// cannot start reports its failure only at the Go; a Go without a held
// start does nothing.
func TestFirstSessionHeldStart(t *testing.T) {
	uid, gid := self()
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	in := startInit(t)
	in.send(t, ocispec.FirstSessionRequest{Go: true}) // nothing held yet
	s := newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: &ocispec.FirstSession{Held: true,
		Args: []string{"sh", "-c", `touch ran; echo "ran in $(pwd)"; exit 4`},
		Env:  []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: uid, GID: gid,
	}}, s.inR, s.outW, s.errW)
	s.sent()
	in.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := in.conn.Read(make([]byte, 512)); err == nil {
		t.Fatalf("a report (%d bytes) before the Go", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the held command ran before the Go")
	}
	in.send(t, ocispec.FirstSessionRequest{Go: true})
	if r := in.report(t); r.Pid <= 0 || r.Exited {
		t.Fatalf("report %+v after the Go, want the start", r)
	}
	if r := in.report(t); !r.Exited || r.Code != 4 {
		t.Fatalf("report %+v, want exit status 4", r)
	}
	if out := readAll(t, s.outR); out != "ran in "+dir+"\n" {
		t.Errorf("stdout %q", out)
	}

	in = startInit(t)
	s = newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: &ocispec.FirstSession{Held: true, Args: []string{"no-such-command-xyz"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: uid, GID: gid}}, s.inR, s.outW, s.errW)
	s.sent()
	in.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := in.conn.Read(make([]byte, 512)); err == nil {
		t.Fatalf("a report (%d bytes) for a held start before the Go", n)
	}
	in.send(t, ocispec.FirstSessionRequest{Go: true})
	if r := in.report(t); !r.Exited || r.Code != ExitNotFound || r.Pid != 0 {
		t.Fatalf("report %+v, want exit status %d and no start", r, ExitNotFound)
	}
	if errs := readAll(t, s.errR); errs != "lazaret: no-such-command-xyz: command not found in the sandbox\n" {
		t.Errorf("stderr %q", errs)
	}
}

// TestFirstSessionHeldStartDroppedWithSocket: a held start whose
// coordinator is gone (its socket's end) never runs, and the init closes
// its streams, so that the session's readers end.
func TestFirstSessionHeldStartDroppedWithSocket(t *testing.T) {
	uid, gid := self()
	dir := t.TempDir()
	in := startInit(t)
	s := newStreams(t)
	in.send(t, ocispec.FirstSessionRequest{Start: &ocispec.FirstSession{Held: true,
		Args: []string{"sh", "-c", "touch ran"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: dir, UID: uid, GID: gid,
	}}, s.inR, s.outW, s.errW)
	s.sent()
	in.conn.CloseWrite()
	if out := readAll(t, s.outR); out != "" {
		t.Errorf("stdout %q", out)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("a held start ran after its coordinator was gone")
	}
}

// TestFirstSessionSignals: a signal request reaches the command's process
// or, with the group flag, its whole process group (it leads its own),
// and the exit reports the signal.
func TestFirstSessionSignals(t *testing.T) {
	uid, gid := self()
	for _, group := range []bool{false, true} {
		in := startInit(t)
		s := newStreams(t)
		in.send(t, ocispec.FirstSessionRequest{Start: &ocispec.FirstSession{
			Args: []string{"sh", "-c", `sleep 30 & echo "$$ $(cut -d' ' -f5 /proc/$$/stat)"; wait`},
			Env:  []string{"PATH=/usr/bin:/bin"}, Cwd: "/", UID: uid, GID: gid,
		}}, s.inR, s.outW, s.errW)
		s.sent()
		started := in.report(t)
		s.outR.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(s.outR).ReadString('\n')
		if f := strings.Fields(line); len(f) != 2 || f[0] != fmt.Sprint(started.Pid) || f[1] != f[0] {
			t.Fatalf("the command printed %q, want its pid %d leading its own process group", line, started.Pid)
		}
		in.send(t, ocispec.FirstSessionRequest{Signal: int(unix.SIGTERM), Group: group})
		if r := in.report(t); !r.Exited || r.Signal != int(unix.SIGTERM) {
			t.Fatalf("group %v: report %+v, want killed by SIGTERM", group, r)
		}
		// With the group signalled the background sleep is gone too and
		// stdout ends at once; signalled alone, the sleep still holds it.
		s.outR.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := io.ReadAll(s.outR)
		if group && err != nil {
			t.Errorf("group signal: stdout did not end: %v", err)
		}
		if !group && err == nil {
			t.Errorf("process signal: stdout ended although the background sleep holds it")
		}
	}
}

func TestLookPathIn(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "plain"), []byte("x"), 0o644)
	for _, c := range []struct {
		argv0, path, file string
		status            int
	}{
		{"tool", "/nonexistent:" + bin, filepath.Join(bin, "tool"), 0},
		{"tool", "bin", filepath.Join(bin, "tool"), 0}, // relative PATH entries resolve in cwd
		{"./bin/tool", "", filepath.Join(bin, "tool"), 0},
		{"plain", bin, "", ExitNotExecutable},
		{"missing", bin, "", ExitNotFound},
		{"bin", dir, "", ExitNotExecutable}, // a directory
	} {
		file, status, msg := lookPathIn(c.argv0, c.path, dir)
		if file != c.file || status != c.status || (status != 0) != (msg != "") {
			t.Errorf("lookPathIn(%q, %q) = %q, %d, %q; want %q, %d", c.argv0, c.path, file, status, msg, c.file, c.status)
		}
	}
}
