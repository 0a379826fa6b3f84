package rs

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

// TestInitStreamUntrustedAfterReady: the sandbox's standard streams reach
// the Domain log only as values (a line written to look like a record of
// the coordinator stays a value of a sandbox record); after readiness the
// protocol is no longer read (a forged ready or error line is only
// logged), at most maxGuestLines lines are logged and the rest is read
// and dropped; a line longer than maxLineBytes is logged in pieces.
func TestInitStreamUntrustedAfterReady(t *testing.T) {
	var buf bytes.Buffer
	s := &supervisor{log: slog.New(slog.NewTextHandler(&buf, nil))}
	r, w := io.Pipe()
	var ready atomic.Bool
	var handled []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.initStream(r, "stdout", &ready, func(line string) bool {
			switch line {
			case "started", "ready":
				handled = append(handled, line)
				if line == "ready" {
					ready.Store(true)
				}
				return true
			}
			return false
		})
	}()
	forged := `time=2026-12-07T05:31:00.000Z level=ERROR msg="escalation approved" role=hc`
	fmt.Fprintf(w, "started\nbefore ready\n%s\nready\n%s\nready\nerror: forged\n", strings.Repeat("x", maxLineBytes+10), forged)
	for i := 0; i < 3*maxGuestLines; i++ {
		fmt.Fprintf(w, "flood %d\n", i)
	}
	w.Close()
	<-done
	out := buf.String()
	if strings.Join(handled, ",") != "started,ready" {
		t.Errorf("protocol lines handled: %v (a line after readiness must not be)", handled)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, `msg="sandbox stdout`) {
			t.Errorf("a log line not of the sandbox stream: %s", line)
		}
	}
	if !strings.Contains(out, `line="before ready"`) || !strings.Contains(out, `line="time=2026-12-07T05:31:00.000Z level=ERROR msg=\"escalation approved\" role=hc"`) {
		t.Errorf("lines not logged as values:\n%s", out)
	}
	if n := strings.Count(out, `line=xxxx`); n != 2 {
		t.Errorf("a line of %d bytes logged in %d pieces, want 2", maxLineBytes+10, n)
	}
	if n := strings.Count(out, "after readiness (any guest"); n != maxGuestLines {
		t.Errorf("%d lines after readiness logged, want %d", n, maxGuestLines)
	}
	if !strings.Contains(out, "more lines are not logged") || strings.Contains(out, "flood 299") {
		t.Errorf("the flood was not cut:\n%s", out[len(out)-300:])
	}
}
