package fdpass

import (
	"errors"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSendRecvFiles(t *testing.T) {
	mine, theirs, err := FilesPair()
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	defer theirs.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := SendFiles(mine, []byte("hello"), w, r); err != nil {
		t.Fatal(err)
	}
	b, fds, err := RecvFiles(int(theirs.Fd()), 16, 2)
	if err != nil || string(b) != "hello" || len(fds) != 2 {
		t.Fatalf("got %q %v %v", b, fds, err)
	}
	defer CloseAll(fds)
	// The received write end is the pipe's: a byte through it arrives.
	if _, err := unix.Write(fds[0], []byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := r.Read(buf); n != 1 || err != nil || buf[0] != 'x' {
		t.Fatalf("read %d %q %v", n, buf, err)
	}
	for _, fd := range fds {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("received descriptor %d is not close-on-exec (%#x, %v)", fd, flags, err)
		}
	}
}

func TestRecvFilesEOFAndRefusals(t *testing.T) {
	mine, theirs, err := FilesPair()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	// Too large a message: refused, not read in part.
	if err := SendFiles(mine, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RecvFiles(int(theirs.Fd()), 4, 1); err == nil {
		t.Fatal("a message larger than max was accepted")
	}
	// More descriptors than asked for: refused, and the ones that arrived
	// are closed (no descriptor leaks into the receiver).
	before := openFDs(t)
	if err := SendFiles(mine, []byte("x"), mine, theirs, mine); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RecvFiles(int(theirs.Fd()), 4, 1); err == nil {
		t.Fatal("a message with more descriptors than asked for was accepted")
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before the refused message, %d after", before, after)
	}
	// The sender closed without a message: io.EOF.
	mine.Close()
	if _, _, err := RecvFiles(int(theirs.Fd()), 4, 1); !errors.Is(err, io.EOF) {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
	// Sending to a closed peer is an error, not SIGPIPE.
	a, b, err := FilesPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b.Close()
	if err := SendFiles(a, []byte("x")); err == nil {
		t.Fatal("sending to a closed peer succeeded")
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
