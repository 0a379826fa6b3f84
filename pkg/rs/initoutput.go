package rs

import (
	"bufio"
	"io"
	"strings"
	"sync/atomic"
)

// maxGuestLines bounds what the Domain log takes, per stream and
// generation, from the sandbox's standard output and error once the init
// is ready.
//
// runsc's standard streams are the container init's (attached `runsc
// run`), and a guest process with root's privileges can open the init's
// /proc/1/fd/1 and /proc/1/fd/2 and write there. Before readiness no guest
// process but the init runs, and runsc's own errors there explain a failed
// start; afterwards what arrives is untrusted: it is logged as a value
// (never as a line of its own, which could forge a record of the
// coordinator), a bounded number of lines, and the rest is read and
// dropped so writers never block.
const maxGuestLines = 100

// maxLineBytes bounds one logged line; a longer one is logged in pieces.
const maxLineBytes = 16 << 10

// initStream logs the lines of one of the sandbox's standard streams,
// read from r until it ends (when runsc and the sandbox have exited).
// handle, when set, takes each line first (the init's readiness protocol
// on its standard output) and reports whether it consumed it; ready tells
// whether the init is ready.
func (s *supervisor) initStream(r io.ReadCloser, stream string, ready *atomic.Bool, handle func(string) bool) {
	defer r.Close()
	br := bufio.NewReaderSize(r, maxLineBytes)
	after := 0
	for {
		b, err := br.ReadSlice('\n')
		if len(b) > 0 {
			line := strings.TrimRight(string(b), "\r\n")
			switch {
			case handle != nil && !ready.Load() && handle(line):
			case !ready.Load():
				s.log.Info("sandbox "+stream, "line", line)
			case after < maxGuestLines:
				after++
				s.log.Warn("sandbox "+stream+" after readiness (any guest process of root can write it)", "line", line)
			case after == maxGuestLines:
				after++
				s.log.Warn("sandbox "+stream+" after readiness: more lines are not logged", "logged", maxGuestLines)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return
		}
	}
}
