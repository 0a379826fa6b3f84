package hc

import (
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// stopSessionsWait bounds how long `lazaret stop` waits for the killed
// sessions to close before the teardown starts anyway (it kills them again).
var stopSessionsWait = 15 * time.Second

// serveStop answers a StopRequest (`lazaret stop`). Each session is closed
// as if its client had gone: its exec client is killed, which starts the
// session's close handshake (a shown escalation prompt is cancelled, a
// running host process killed and reaped) and ends it with an Exit frame
// marked stopped; the last session's leave then starts the normal teardown.
// In the protocol model that is DisconnectSession for every session followed
// by BeginTeardown; no session registers meanwhile (a joining CLI is told to
// retry). A generation that is not running (starting, failed, already
// stopping) or has no session is torn down at once.
func (c *coordinator) serveStop(conn *control.Conn, req *lv1.StopRequest) {
	if req.ProtocolVersion != lv1.ProtocolVersion_PROTOCOL_VERSION_1 {
		refuse(conn, errdefs.New(errdefs.ErrRefused, "control protocol version %d is not supported", req.ProtocolVersion))
		return
	}
	c.mu.Lock()
	sessions, first, teardown := c.sessions.Stop(c.st == stateRunning)
	for _, s := range sessions {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
	}
	if teardown {
		c.requestTeardownLocked()
	}
	gen := c.generation
	c.mu.Unlock()
	if first {
		c.log.Info("stop requested: closing every session", "sessions", len(sessions))
		for _, s := range sessions {
			s.kill()
		}
		go func() {
			select {
			case <-c.teardownC:
			case <-time.After(stopSessionsWait):
				c.log.Warn("sessions did not close after lazaret stop: tearing down", "wait", stopSessionsWait)
				c.mu.Lock()
				c.requestTeardownLocked()
				c.mu.Unlock()
			}
		}()
	}
	conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Stopping{Stopping: &lv1.Stopping{Generation: gen, Sessions: uint32(len(sessions))}}})
}

// refuseOrStopped ends a session that could not run: with an Exit marked
// stopped when `lazaret stop` ended it before its command started, else
// with err.
func (s *session) refuseOrStopped(err error) {
	if s.wasStopped() {
		s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: 137, Signal: 9, Stopped: true}}})
		return
	}
	refuse(s.conn, err)
}
