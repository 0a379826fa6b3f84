package rawio_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pty"
	"github.com/lazaret/lazaret/pkg/rawio"
)

// terminalPair is a PTY whose slave is in raw mode, for a TerminalWriter
// to write and the test to read at the master (or leave unread: a stalled
// terminal).
func terminalPair(t *testing.T) (*pty.Master, *os.File) {
	t.Helper()
	m, slave, err := pty.Open(pty.Size{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); slave.Close() })
	if err := pty.MakeRaw(slave); err != nil {
		t.Fatal(err)
	}
	return m, slave
}

// TestTerminalWriterDeliversInOrder: every byte arrives, in order, on a
// blocking terminal descriptor and on a non-blocking one (EAGAIN leads
// back to the wait for room).
func TestTerminalWriterDeliversInOrder(t *testing.T) {
	for _, nonblock := range []bool{false, true} {
		t.Run(fmt.Sprintf("nonblock=%v", nonblock), func(t *testing.T) {
			m, slave := terminalPair(t)
			if err := unix.SetNonblock(int(slave.Fd()), nonblock); err != nil {
				t.Fatal(err)
			}
			w := rawio.NewTerminalWriter(int(slave.Fd()))
			want := make([]byte, 1<<20)
			for i := range want {
				want[i] = byte('a' + i%26)
			}
			errc := make(chan error, 1)
			go func() {
				// Frames of uneven sizes, as the relay writes them.
				rest := want
				for len(rest) > 0 {
					k := min(len(rest), 1+len(rest)%50000)
					if n, err := w.Write(rest[:k]); err != nil || n != k {
						errc <- fmt.Errorf("wrote %d of %d: %v", n, k, err)
						return
					}
					rest = rest[k:]
				}
				errc <- nil
			}()
			got := make([]byte, 0, len(want))
			buf := make([]byte, 64<<10)
			m.SetReadDeadline(time.Now().Add(30 * time.Second))
			for len(got) < len(want) {
				n, err := m.Read(buf)
				if err != nil {
					t.Fatalf("read after %d bytes: %v", len(got), err)
				}
				got = append(got, buf[:n]...)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("bytes differ from what was written")
			}
		})
	}
}

// stallChildEnv makes the test binary run stalledScenario (with the
// GOMAXPROCS it names) and exit: a writer that holds its processor
// against the runtime freezes the whole process, timers included, so only
// another process can notice and report it.
const stallChildEnv = "RAWIO_TEST_STALL_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(stallChildEnv); v != "" {
		procs, _ := strconv.Atoi(v)
		if err := stalledScenario(procs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestTerminalWriterStalledStaysPreemptible: while the terminal takes no
// output at all, the writer must not hold its processor against the
// runtime: garbage collection (which stops the world) completes and, with
// a single processor, other goroutines still run. A plain raw blocking
// write fails both (the kernel restarts it after every signal), and the
// child process then never finishes.
func TestTerminalWriterStalledStaysPreemptible(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			c := exec.Command(os.Args[0], "-test.run=^$")
			c.Env = append(os.Environ(), fmt.Sprintf("%s=%d", stallChildEnv, procs))
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("stalled-terminal scenario: %v\n%s", err, out.String())
				}
			case <-time.After(30 * time.Second):
				c.Process.Kill() // the child this test started
				<-done
				t.Fatalf("stalled-terminal scenario froze for 30 s: the writer held its processor against the runtime\n%s", out.String())
			}
		})
	}
}

// stalledScenario writes far more than a PTY buffers to one nobody reads,
// checks that garbage collection and (with procs = 1) another goroutine's
// timer still run, then drains the terminal and checks the write ends.
func stalledScenario(procs int) error {
	runtime.GOMAXPROCS(procs)
	m, slave, err := pty.Open(pty.Size{Rows: 24, Cols: 80})
	if err != nil {
		return err
	}
	defer m.Close()
	defer slave.Close()
	if err := pty.MakeRaw(slave); err != nil {
		return err
	}
	w := rawio.NewTerminalWriter(int(slave.Fd()))
	// 384 KiB: several times what the kernel buffers for a PTY (the line
	// discipline's 4 KiB and the flip buffers' 64 KiB), so the writer waits;
	// a larger write only takes longer to drain (1.5 MiB took 4 s with one
	// processor).
	data := bytes.Repeat([]byte("stalled terminal output\n"), 1<<14)
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(data)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the writer fills the terminal and waits
	select {
	case err := <-done:
		return fmt.Errorf("write of %d bytes to an unread terminal returned early: %v", len(data), err)
	default:
	}
	runtime.GC()
	if n, err := io.CopyN(io.Discard, readerOf(m), int64(len(data))); err != nil {
		return fmt.Errorf("drained %d bytes: %v", n, err)
	}
	return <-done
}

type masterReader struct{ m *pty.Master }

func (r masterReader) Read(b []byte) (int, error) {
	r.m.SetReadDeadline(time.Now().Add(30 * time.Second))
	return r.m.Read(b)
}

func readerOf(m *pty.Master) io.Reader { return masterReader{m} }

// TestTerminalWriterHangUp: a terminal that goes away ends the write with
// an error instead of a wait.
func TestTerminalWriterHangUp(t *testing.T) {
	m, slave := terminalPair(t)
	w := rawio.NewTerminalWriter(int(slave.Fd()))
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(bytes.Repeat([]byte("x"), 1<<20))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	m.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("write to a hung-up terminal reported no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write to a hung-up terminal did not return")
	}
}
