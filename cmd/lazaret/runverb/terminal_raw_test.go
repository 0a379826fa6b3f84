package runverb

import (
	"bytes"
	"testing"
	"time"

	"github.com/containerd/console"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pty"
)

// TestRawModeHandsOutputThrough checks the CLI's terminal mode: the guest's
// bytes (already processed by the guest's own terminal) reach the outer
// terminal unchanged — no second ONLCR turning CR LF into CR CR LF or a raw
// guest's bare LF into CR LF — and restore brings back every saved mode.
func TestRawModeHandsOutputThrough(t *testing.T) {
	m, slave, err := pty.Open(pty.Size{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer slave.Close()
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Oflag&(unix.OPOST|unix.ONLCR) != unix.OPOST|unix.ONLCR {
		t.Fatalf("fresh terminal without output processing: oflag %#x", before.Oflag)
	}
	cons, err := console.ConsoleFromFile(slave)
	if err != nil {
		t.Fatal(err)
	}
	c := &ttyClient{term: slave, cons: cons}
	if err := c.enterRaw(); err != nil {
		t.Fatal(err)
	}
	raw, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if raw.Oflag&unix.OPOST != 0 || raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG|unix.IEXTEN) != 0 || raw.Iflag&(unix.ICRNL|unix.IXON) != 0 {
		t.Errorf("not raw: iflag %#x oflag %#x lflag %#x", raw.Iflag, raw.Oflag, raw.Lflag)
	}
	const out = "guest\r\nraw\nline\r\n"
	if _, err := slave.Write([]byte(out)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 256)
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < len(out) {
		n, err := m.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("read %q: %v", got, err)
		}
	}
	if !bytes.Equal(got, []byte(out)) {
		t.Errorf("outer terminal received %q, want %q unchanged", got, out)
	}
	c.restore()
	after, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if *after != *before {
		t.Errorf("modes not restored:\n before %+v\n after  %+v", *before, *after)
	}
}
