package pty

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSizeValidate(t *testing.T) {
	for _, s := range []Size{{Rows: 0, Cols: 80}, {Rows: 24, Cols: 0}, {Rows: 70000, Cols: 80}, {Rows: 24, Cols: 80, XPixels: 1 << 16}} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if err := (Size{Rows: 65535, Cols: 1}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestOpenRelayResizeEOF(t *testing.T) {
	m, slave, err := Open(Size{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, _ := GetSize(slave); got != (Size{Rows: 24, Cols: 80}) {
		t.Errorf("initial size %v", got)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != unix.ECHO|unix.ICANON|unix.ISIG {
		t.Errorf("slave not cooked: lflag %#x", tio.Lflag)
	}
	if _, err := m.Index(); err != nil {
		t.Error(err)
	}
	// The session slave stays cooked; MakeRaw is tested on it here.
	if err := MakeRaw(slave); err != nil {
		t.Fatal(err)
	}
	tio, _ = unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if tio.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 || tio.Oflag&unix.OPOST != 0 {
		t.Errorf("slave not raw: lflag %#x oflag %#x", tio.Lflag, tio.Oflag)
	}
	if fl, _ := unix.FcntlInt(slave.Fd(), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Error("slave not close-on-exec")
	}
	// Output: slave → master, byte-exact (raw: no \n → \r\n).
	if _, err := slave.Write([]byte("a\nb\x03")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := m.Read(buf)
	if err != nil || string(buf[:n]) != "a\nb\x03" {
		t.Fatalf("master read %q %v", buf[:n], err)
	}
	// Input: master → slave, Ctrl-C is a byte, not a signal.
	if _, err := m.Write([]byte("x\x03y")); err != nil {
		t.Fatal(err)
	}
	n, err = slave.Read(buf)
	if err != nil || string(buf[:n]) != "x\x03y" {
		t.Fatalf("slave read %q %v", buf[:n], err)
	}
	if err := m.Resize(Size{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	if got, _ := GetSize(slave); got != (Size{Rows: 40, Cols: 120}) {
		t.Errorf("size after resize %v", got)
	}
	if err := m.Resize(Size{Rows: 0, Cols: 1}); err == nil {
		t.Error("zero rows accepted")
	}
	// A read deadline bounds a read with no data.
	m.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := m.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read without data: %v", err)
	}
	// Bytes written before the slave closes are still read, then EOF.
	slave.Write([]byte("last"))
	slave.Close()
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got bytes.Buffer
	for {
		n, err := m.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			if err != io.EOF {
				t.Fatalf("after slave close: %v", err)
			}
			break
		}
	}
	if got.String() != "last" {
		t.Errorf("drained %q", got.String())
	}
}
