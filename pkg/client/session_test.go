package client

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/trust"
)

// runOnce opens a session of req against the coordinator of paths and
// returns its End (and the events before it).
func runOnce(t *testing.T, paths domain.Paths, req *lv1.RunRequest, opts SessionOptions, onAccepted func(*Session)) (*End, []*lv1.ServerFrame) {
	t.Helper()
	conn, err := Connect(paths, testProfile)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := trust.NewSessionAnchor(nil)
	req.SessionRegistration = a.Registration(conn.Identity, conn.ClientID).Encode()
	s := conn.Session(req, a)
	defer s.Close()
	if opts.Output == nil {
		opts.Output = func(lv1.Stream, []byte) {}
	}
	s.Start(opts)
	var frames []*lv1.ServerFrame
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-s.Events():
			if ev.End != nil {
				return ev.End, frames
			}
			frames = append(frames, ev.Frame)
			if ev.Frame.GetAccepted() != nil && onAccepted != nil {
				onAccepted(s)
			}
		case <-timeout:
			t.Fatal("no End within 30s")
		}
	}
}

func accepted(fc *control.Conn) {
	fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: "s"}}})
}

// TestSessionEnds: how a session ends decides whether the CLI starts or
// joins again: a coordinator that closes before answering, or refuses
// with retry before accepting, was stopping (Retry); a refusal is its
// error in its category; a connection lost after Accepted is Lost; Exit
// carries the status and whether `lazaret stop` ended it.
func TestSessionEnds(t *testing.T) {
	cases := []struct {
		name  string
		serve func(fc *control.Conn)
		check func(*End) bool
	}{
		{"closed before answering", func(*control.Conn) {}, func(e *End) bool { return e.Retry }},
		{"retry before accepted", func(fc *control.Conn) {
			fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Error{Error: &lv1.Error{Category: "unavailable", Message: "stopping", Retry: true}}})
		}, func(e *End) bool { return e.Retry }},
		{"refused", func(fc *control.Conn) {
			fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Error{Error: &lv1.Error{Category: "refused", Message: "another configuration"}}})
		}, func(e *End) bool {
			return !e.Retry && !e.Lost && errors.Is(e.Err, errdefs.ErrRefused) && e.Err.Error() == "another configuration"
		}},
		{"retry after accepted is an error", func(fc *control.Conn) {
			accepted(fc)
			fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Error{Error: &lv1.Error{Category: "unavailable", Message: "gone", Retry: true}}})
		}, func(e *End) bool { return !e.Retry && errors.Is(e.Err, errdefs.ErrUnavailable) }},
		{"lost after accepted", func(fc *control.Conn) { accepted(fc) }, func(e *End) bool { return e.Lost && errors.Is(e.Err, errdefs.ErrUnavailable) }},
		{"stopped", func(fc *control.Conn) {
			accepted(fc)
			fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: 143, Stopped: true}}})
		}, func(e *End) bool { return e.Stopped && e.Code == 143 && e.Err == nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCoordinator(t, newRoots(t), "/w", func(_ *trust.Anchor, fc *control.Conn, _ *lv1.ClientFrame, _ *trust.ClientIdentity) { tc.serve(fc) })
			end, _ := runOnce(t, c.paths, &lv1.RunRequest{}, SessionOptions{}, nil)
			if !tc.check(end) {
				t.Errorf("end %+v", end)
			}
		})
	}
}

// TestTerminalSession: an interactive session's output waits after
// Accepted until the caller is ready (its terminal in raw mode), Inline
// frames are handled on the reader in order with the output, and SIGTERM
// is not forwarded (the CLI leaves; the coordinator releases the session).
func TestTerminalSession(t *testing.T) {
	got := make(chan *lv1.ClientFrame, 4)
	c := startCoordinator(t, newRoots(t), "/w", func(_ *trust.Anchor, fc *control.Conn, _ *lv1.ClientFrame, _ *trust.ClientIdentity) {
		accepted(fc)
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: lv1.Stream_STREAM_TERMINAL, Data: []byte("a")}}})
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_HostProcessStarted{HostProcessStarted: &lv1.HostProcessStarted{RequestId: "r"}}})
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: lv1.Stream_STREAM_TERMINAL, Data: []byte("b")}}})
		var f lv1.ClientFrame
		if fc.Read(&f) == nil {
			got <- &f
		}
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{}}})
	})
	var seq []string // written on the reader goroutine, read after End
	ready := false
	opts := SessionOptions{
		HoldOutput: true,
		Output: func(_ lv1.Stream, b []byte) {
			if !ready {
				t.Error("output before OutputReady")
			}
			seq = append(seq, string(b))
		},
		Inline: func(f *lv1.ServerFrame) bool {
			if f.GetHostProcessStarted() == nil {
				return false
			}
			seq = append(seq, "host")
			return true
		},
	}
	end, frames := runOnce(t, c.paths, &lv1.RunRequest{Tty: true}, opts, func(s *Session) {
		time.Sleep(50 * time.Millisecond) // the reader would write now if it did not hold
		if s.Forward(syscall.SIGTERM) {
			t.Error("SIGTERM forwarded in an interactive session")
		}
		ready = true
		s.OutputReady()
		s.Forward(syscall.SIGQUIT)
	})
	if end.Code != 0 || end.Err != nil || len(frames) != 1 {
		t.Fatalf("end %+v frames %v", end, frames)
	}
	if f := <-got; f.GetQuit() == nil {
		t.Errorf("SIGQUIT frame %v", f)
	}
	if len(seq) != 3 || seq[0] != "a" || seq[1] != "host" || seq[2] != "b" {
		t.Errorf("reader order %v", seq)
	}
}

// TestStop: Stop returns what the coordinator stopped once the Domain lock
// is free; a Domain that is not published was not running.
func TestStop(t *testing.T) {
	roots := newRoots(t)
	c := startCoordinator(t, roots, "/w", func(_ *trust.Anchor, fc *control.Conn, first *lv1.ClientFrame, _ *trust.ClientIdentity) {
		if first.GetStop() != nil {
			fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Stopping{Stopping: &lv1.Stopping{Generation: 3, Sessions: 2}}})
		}
	})
	st, err := Stop(c.paths, testProfile, 5*time.Second)
	if err != nil || st.GetGeneration() != 3 || st.GetSessions() != 2 {
		t.Errorf("Stop: %v %v", st, err)
	}
	absent, _ := domain.PathsFor(roots, domain.DeriveID(testProfile, "/other"))
	if st, err := Stop(absent, testProfile, time.Second); st != nil || err != nil {
		t.Errorf("Stop of a stopped Domain: %v %v", st, err)
	}
}

// TestCheckRequestSize: a request the control protocol cannot carry is
// refused as the developer's input (ErrInvalid, saying what to do), before
// Starter.Run connects to or starts anything; an ordinary one passes.
func TestCheckRequestSize(t *testing.T) {
	small := &lv1.RunRequest{Argv: []string{"true"}}
	if err := CheckRequestSize(small); err != nil {
		t.Fatalf("an ordinary request refused: %v", err)
	}
	big := &lv1.RunRequest{Argv: []string{"sh", "-c", "echo"}}
	for i := 0; i < 15; i++ {
		big.Argv = append(big.Argv, strings.Repeat("a", 100_000))
	}
	err := CheckRequestSize(big)
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "more than a session request carries") || !strings.Contains(err.Error(), "standard input") {
		t.Fatalf("an oversize request: %v", err)
	}
	// Starter.Run refuses it before it needs anything of the Starter.
	if end, err := (&Starter{}).Run(big, nil, nil); end != nil || !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Starter.Run of an oversize request: %v, %v", end, err)
	}
}
