package sessionterm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
	"github.com/lazaret/lazaret/pkg/pty"
)

func TestParseStat(t *testing.T) {
	line := "7 (we ird) name)) S 0 7 7 34816 7 4194560 1 0 0 0 3 1 0 0 20 0 1 0 1234 4644864 900 18446744073709551615"
	st, err := parseStat(line, 7)
	if err != nil || st.pgrp != 7 || st.start != 1234 {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := parseStat(line, 8); err == nil {
		t.Error("stat of another pid accepted")
	}
	if _, err := parseStat("7 (x) S 0 7", 7); err == nil {
		t.Error("short stat accepted")
	}
}

func TestPsHasGroup(t *testing.T) {
	out := []byte("UID       PID       PPID      PGID      C         TTY       STIME     TIME      CMD\n" +
		"0         1         0         1         0         ?         02:08     0s        lazaret-escalat\n" +
		"0         13        8         8         0         pts/0     02:08     20ms      sleep\n")
	if ok, err := psHasGroup(out, 8); !ok || err != nil {
		t.Errorf("group 8: %v %v", ok, err)
	}
	if ok, err := psHasGroup(out, 13); ok || err != nil {
		t.Errorf("group 13 (a pid, not a group): %v %v", ok, err)
	}
	if _, err := psHasGroup([]byte("garbage\n"), 8); err == nil {
		t.Error("output without PGID column accepted")
	}
}

func TestValidate(t *testing.T) {
	for _, r := range []*lv1.RunRequest{
		{Tty: true},
		{Tty: true, WindowSize: &lv1.WindowSize{Rows: 0, Cols: 80}},
		{Tty: true, WindowSize: &lv1.WindowSize{Rows: 24, Cols: 70000}},
		{Tty: false, WindowSize: &lv1.WindowSize{Rows: 24, Cols: 80}},
	} {
		if Validate(r) == nil {
			t.Errorf("accepted %v", r)
		}
	}
	if err := Validate(&lv1.RunRequest{Tty: true, WindowSize: &lv1.WindowSize{Rows: 24, Cols: 80}}); err != nil {
		t.Error(err)
	}
}

// TestPumpOutputGateAndBackpressure: the pump forwards PTY bytes in
// order as Output frames; while the route is not the sandbox route it
// stops reading the master (bytes stay in the kernel PTY); a client that
// does not read blocks the pump (no user-space queue grows).
func TestPumpOutputGateAndBackpressure(t *testing.T) {
	master, slave, err := pty.Open(pty.Size{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	if err := pty.MakeRaw(slave); err != nil {
		t.Fatal(err)
	}
	srv, cli := net.Pipe() // synchronous: a write waits for the reader
	defer srv.Close()
	defer cli.Close()
	tm := &Terminal{s: Session{Conn: control.NewConn(srv)}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), master: master, gate: newOutputGate()}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); tm.pumpOutput(quit) }()
	defer func() { close(quit); master.Close(); srv.Close(); <-done }()
	client := control.NewConn(cli)
	readAll := func(want string) {
		t.Helper()
		var got []byte
		for len(got) < len(want) {
			var f lv1.ServerFrame
			cli.SetReadDeadline(time.Now().Add(5 * time.Second))
			if err := client.Read(&f); err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			if f.GetOutput().GetStream() != lv1.Stream_STREAM_TERMINAL {
				t.Fatalf("frame %v", &f)
			}
			got = append(got, f.GetOutput().GetData()...)
		}
		if string(got) != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}

	// Closed gate (route not the sandbox route): nothing is read.
	slave.Write([]byte("held"))
	time.Sleep(100 * time.Millisecond)
	if n := inQueue(t, master); n != 4 {
		t.Fatalf("closed gate: %d bytes left in the PTY, want 4 (the pump read the master)", n)
	}
	tm.SetRoute(RouteSandbox)
	readAll("held")
	slave.Write([]byte("-next"))
	readAll("-next")

	// A client that stops reading: the pump blocks in its write, so output
	// accumulates in the kernel PTY, never in the coordinator.
	big := bytes.Repeat([]byte("x"), 3000)
	slave.Write(big) // taken by the pump, which then blocks on the pipe
	// The pump took its read once the frame's write began: the test reads
	// the frame's first byte (and puts it back for readAll).
	first := make([]byte, 1)
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(cli, first); err != nil {
		t.Fatalf("no output frame began: %v", err)
	}
	client = control.NewConn(struct {
		io.Reader
		io.Writer
	}{io.MultiReader(bytes.NewReader(first), cli), cli})
	slave.Write([]byte("tail"))
	time.Sleep(100 * time.Millisecond)
	// The pump holds at most one read (the kernel may split the 3000 bytes
	// across reads): at least the tail is still in the kernel PTY.
	if n := inQueue(t, master); n < 4 {
		t.Fatalf("blocked client: %d bytes left in the PTY, want at least the 4-byte tail (the pump kept reading)", n)
	}
	readAll(string(big) + "tail")
}

// inQueue is the number of bytes waiting to be read on the master.
func inQueue(t *testing.T, m *pty.Master) int {
	t.Helper()
	n, err := m.Buffered()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIdentifyFromLaunchersReport: the guest leader's identity is the
// launcher's report, accepted only when runsc's pid file names the same
// process and it leads its group; a launcher that reports nothing, too
// much or garbage is not identified.
func TestIdentifyFromLaunchersReport(t *testing.T) {
	stat := func(pid, pgrp int) string {
		return fmt.Sprintf("%d (sh) S 1 %d %d 34816 7 4194560 1 0 0 0 3 1 0 0 20 0 1 0 1234 4644864 900 18446744073709551615", pid, pgrp, pgrp)
	}
	broker := proctest.SelfBroker(t)
	for _, c := range []struct {
		name    string
		report  string // written, then the pipe is closed
		pidFile string // "" = never written
		want    error  // nil = identified
		detail  string
	}{
		{"identified", stat(42, 42) + "\n", "42\n", nil, ""},
		{"another process than runsc started", stat(42, 42) + "\n", "43", errdefs.ErrRefused, "runsc started 43"},
		{"not its group's leader", stat(42, 7) + "\n", "42", errdefs.ErrRefused, "process group 7"},
		{"malformed", "hello world\n", "42", errdefs.ErrRefused, "malformed"},
		{"another pid's stat", "42 (sh) S 1\n", "42", errdefs.ErrRefused, "short stat"},
		{"no report", "", "42", errdefs.ErrUnavailable, "reported no identity"},
		{"no newline", stat(42, 42), "42", errdefs.ErrUnavailable, "reported no identity"},
		{"oversized", strings.Repeat("4", 2*maxIdentity), "42", errdefs.ErrRefused, "exceeds"},
		{"no pid file before the exec client's exit", stat(42, 42) + "\n", "", errdefs.ErrUnavailable, "exited before reporting the guest pid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "s.pid")
			if c.pidFile != "" {
				os.WriteFile(pidFile, []byte(c.pidFile), 0o600)
			}
			child, err := broker.Start("true", proc.Command{Path: "/bin/true", Args: []string{"true"}})
			if err != nil {
				t.Fatal(err)
			}
			child.Status()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			go func() { io.WriteString(w, c.report); w.Close() }()
			term := &Terminal{clock: realClock{}, child: child}
			err = term.identify(pidFile, r)
			if c.want == nil {
				if err != nil || !term.identified || term.id.GuestLeaderPID != 42 || term.id.GuestPGID != 42 || term.id.GuestLeaderStart != 1234 {
					t.Fatalf("identify: %v, identity %+v", err, term.id)
				}
				return
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.detail) || term.identified {
				t.Fatalf("identify: %v, want %v containing %q", err, c.want, c.detail)
			}
		})
	}
}
