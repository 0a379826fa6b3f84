package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns a connected unix stream pair, the first end wrapped.
func pair(t *testing.T) (*Conn, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, _ := l.AcceptUnix()
		accepted <- c
	}()
	d, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	c, err := NewConn(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

// TestConnWriteWaitsForRoom: a write larger than the socket buffers
// completes in full, in order, while the peer reads slowly (the writer
// waits in the poller, never in the kernel, and loses no byte).
func TestConnWriteWaitsForRoom(t *testing.T) {
	c, peer := pair(t)
	want := make([]byte, 8<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	done := make(chan error, 1)
	go func() {
		n, err := c.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 4096)
	for len(got) < len(want) {
		n, err := peer.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		if len(got) < 64<<10 {
			time.Sleep(time.Millisecond) // slow start: the writer must wait for room
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes differ")
	}
}

// TestConnReadDeadlineAndEOF: a read waits for data, honours the
// connection's read deadline, and reports io.EOF once the peer closed.
func TestConnReadDeadlineAndEOF(t *testing.T) {
	c, peer := pair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 16)
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	c.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		peer.Write([]byte("hello"))
		peer.Close()
	}()
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
}

// TestConnClosed: reads and writes on a closed connection report
// net.ErrClosed, as net's own connections do.
func TestConnClosed(t *testing.T) {
	c, _ := pair(t)
	c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read: %v", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write: %v", err)
	}
}

// TestConnHoldFlush: writes between Hold and Flush leave together, in
// order, after anything written before; the peer reads the same bytes.
func TestConnHoldFlush(t *testing.T) {
	c, peer := pair(t)
	c.Write([]byte("a-"))
	c.Hold()
	c.Write([]byte("b-"))
	c.Write([]byte("c-"))
	peer.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 64)
	n, _ := peer.Read(buf)
	if string(buf[:n]) != "a-" {
		t.Fatalf("before Flush the peer read %q, want only %q", buf[:n], "a-")
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("d"))
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	for len(got) < 5 {
		n, err := peer.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "b-c-d" {
		t.Fatalf("after Flush: %q, want %q", got, "b-c-d")
	}
}
