package hc

import (
	"encoding/json"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// firstTestSlot is a slot whose init end the test plays.
func firstTestSlot(t *testing.T) (*firstSlot, *net.UnixConn) {
	t.Helper()
	slot, err := newFirstSlot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.FileConn(slot.theirs)
	slot.theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slot.close(); c.Close() })
	return slot, c.(*net.UnixConn)
}

func initReport(t *testing.T, c *net.UnixConn, r ocispec.FirstSessionReport) {
	t.Helper()
	r.Version = ocispec.FirstSessionVersion
	b, _ := json.Marshal(r)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func initRequest(t *testing.T, c *net.UnixConn) (ocispec.FirstSessionRequest, int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	fds := 0
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			got, _ := unix.ParseUnixRights(&m)
			for _, fd := range got {
				unix.Close(fd)
			}
			fds += len(got)
		}
	}
	var r ocispec.FirstSessionRequest
	if err := json.Unmarshal(buf[:n], &r); err != nil || r.Version != ocispec.FirstSessionVersion {
		t.Fatalf("request %q: %v", buf[:n], err)
	}
	return r, fds
}

// TestFirstStartCancel: a held start given up closes the first-session
// socket (the init drops the start on its end, so it never runs) and the
// coordinator's ends of the session's streams; on nil it does nothing.
func TestFirstStartCancel(t *testing.T) {
	slot, initEnd := firstTestSlot(t)
	var ends []*os.File
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, r, w)
		return r, w
	}
	_, inW := pipe()
	outR, _ := pipe()
	errR, _ := pipe()
	st := &firstStart{p: &firstProcess{slot: slot, done: make(chan struct{})}, inW: inW, outR: outR, errR: errR}
	st.cancel()
	initEnd.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := initEnd.Read(make([]byte, 512)); n != 0 || err == nil {
		t.Fatalf("the init's end read %d bytes, %v; want the socket's end", n, err)
	}
	for _, f := range []*os.File{inW, outR, errR} {
		if _, err := f.Stat(); err == nil {
			t.Errorf("%s still open after cancel", f.Name())
		}
	}
	if slot.claim() {
		t.Error("the slot can be claimed again after a cancelled start")
	}
	var none *firstStart
	none.cancel()
	for _, f := range ends {
		f.Close()
	}
}

// TestFirstSlotClaimedOnce: one session gets the slot; none without one.
func TestFirstSlotClaimedOnce(t *testing.T) {
	slot, _ := firstTestSlot(t)
	if !slot.claim() || slot.claim() {
		t.Fatal("the slot was not claimed exactly once")
	}
	var none *firstSlot
	if none.claim() {
		t.Fatal("a coordinator without a socket has a first session")
	}
	none.close()
}

// TestFirstSlotSend: a request carries its descriptors; one larger than
// a message is refused before anything is sent.
func TestFirstSlotSend(t *testing.T) {
	slot, init := firstTestSlot(t)
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	start := &ocispec.FirstSession{Args: []string{"true"}, Cwd: "/"}
	if err := slot.send(ocispec.FirstSessionRequest{Start: start}, r, w, w); err != nil {
		t.Fatal(err)
	}
	if got, fds := initRequest(t, init); got.Start == nil || got.Start.Args[0] != "true" || fds != 3 {
		t.Fatalf("the init got %+v with %d descriptors", got, fds)
	}
	big := &ocispec.FirstSession{Args: []string{"true"}, Cwd: "/", Env: []string{string(make([]byte, ocispec.FirstSessionMaxMessage))}}
	if err := slot.send(ocispec.FirstSessionRequest{Start: big}); err != errFirstTooLarge {
		t.Fatalf("oversized start: %v", err)
	}
}

// TestFirstProcessReports: the init's reports start and end the session's
// process with the status it reported (exit code or signal); a message
// that is not a report is ignored; the socket's end reports it killed.
func TestFirstProcessReports(t *testing.T) {
	for _, c := range []struct {
		r    *ocispec.FirstSessionReport // nil: the socket ends
		want pidfs.ExitStatus
	}{
		{&ocispec.FirstSessionReport{Exited: true, Code: 3}, pidfs.ExitStatus{Exited: true, Code: 3}},
		{&ocispec.FirstSessionReport{Exited: true, Signal: int(unix.SIGTERM)}, pidfs.ExitStatus{Signal: unix.SIGTERM}},
		{nil, pidfs.ExitStatus{Signal: unix.SIGKILL}},
	} {
		slot, init := firstTestSlot(t)
		p := &firstProcess{slot: slot, done: make(chan struct{})}
		started := make(chan struct{})
		go p.reports(func() { close(started) })
		initReport(t, init, ocispec.FirstSessionReport{Pid: 42})
		<-started
		init.Write([]byte("not a report"))
		select {
		case <-p.Done():
			t.Fatal("done before the exit")
		case <-time.After(50 * time.Millisecond):
		}
		if c.r != nil {
			initReport(t, init, *c.r)
		} else {
			init.Close()
		}
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("not done after the exit")
		}
		if st, _ := p.Status(); st != c.want {
			t.Errorf("status %+v, want %+v", st, c.want)
		}
	}
}

// TestFirstProcessSignal: a signal goes to the init; a SIGKILL whose exit
// the init never reports ends the session killed after the grace, and at
// once when the init cannot be reached.
func TestFirstProcessSignal(t *testing.T) {
	defer func(g time.Duration) { closeGrace = g }(closeGrace)
	closeGrace = 200 * time.Millisecond
	slot, init := firstTestSlot(t)
	p := &firstProcess{slot: slot, done: make(chan struct{})}
	if err := p.signal(unix.SIGINT, true); err != nil {
		t.Fatal(err)
	}
	if r, _ := initRequest(t, init); r.Signal != int(unix.SIGINT) || !r.Group {
		t.Fatalf("the init got %+v, want the group SIGINT", r)
	}
	if err := p.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r, _ := initRequest(t, init); r.Signal != int(unix.SIGKILL) || r.Group {
		t.Fatalf("the init got %+v, want SIGKILL", r)
	}
	select {
	case <-p.Done():
		t.Fatal("ended before the grace")
	case <-time.After(50 * time.Millisecond):
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not ended after the grace")
	}
	if st, _ := p.Status(); st.Exited || st.Signal != unix.SIGKILL {
		t.Fatalf("status %+v, want killed", st)
	}

	slot2, init2 := firstTestSlot(t)
	p2 := &firstProcess{slot: slot2, done: make(chan struct{})}
	init2.Close()
	p2.Signal(unix.SIGKILL)
	select {
	case <-p2.Done():
	case <-time.After(50 * time.Millisecond):
		t.Fatal("a SIGKILL that cannot reach the init did not end the session at once")
	}
}
