// Package sessionterm is the Session Terminal role of a Host Coordinator:
// the host PTY of one interactive Client Session, the `runsc exec` client
// whose controlling terminal it is, the guest process group that client
// leads in the sandbox, and the Domain Store record that names them.
//
// The record (Recorder, StoreRecorder, Recover) follows the
// session_terminal participant rules:
//
//	Intent ──exec client + guest group identified──▶ Running
//	   │                                                │
//	   └──failure before Running──▶ ReleaseIntent ◀──close, connection/PTY/exec loss
//	                                     │
//	                                     └──group, exec client and PTY absent──▶ Clean
//
// Recover reconciles the records a dead generation left: each exec client
// is proven absent (the guest group went with the sandbox, which the caller
// proved gone), then the record becomes Clean; a record whose exec client
// is not proven absent stays as it is and is reported.
//
// As a participant role: Run begins (Intent), commits (Running, once the
// guest group is identified), releases (ReleaseIntent) and cleans with
// proof (Clean, only with the group, the exec client and the PTY observed
// absent); Recover recovers a dead generation's records. The terminal
// does not talk to the Runtime Supervisor.
//
// What the role needs from the coordinator is given as values, never the
// coordinator: a Domain (the broker, runsc and the generation's container,
// the Recorder), a Session (the client connection and capability, the
// command's process document, the hand-over of the exec client) and the
// escalation side of the event loop as Routes, generic over the
// escalation role's prompt and host-run types. Serve runs the event loop
// of a terminal that is already attached (tests of route handlers).
//
// # The terminal
//
// The coordinator owns one host PTY master per interactive session; the
// slave is the stdin, stdout, stderr and controlling terminal of a
// non-detached `runsc exec` whose process document says `terminal: true`
// (no --console-socket). The CLI never holds the sandbox PTY: it relays
// bytes and events over its control connection.
//
// Acquisition (the Session Terminal record):
//
//	RecordIntent → pty.Open → broker.Acquire(exec wrapper, Setsid+Setctty:
//	  RecordStaged, then Accepted while the exec client waits at its exec
//	  stop, then the release) → the launcher's /proc/self/stat on the
//	  identity pipe (pid, pgrp == pid, start time) and the same pid in
//	  --internal-pid-file → RecordRunning → events admitted
//
// Accepted precedes the release because a CLI that loses its coordinator
// before Accepted starts or joins again (client.End.Retry): it must never
// run a command twice. The events the CLI sends from Accepted on wait
// unread until RecordRunning.
//
// The identity pipe's write end is the exec client's descriptor
// ocispec.IdentityFD, passed to the guest (`runsc exec --pass-fd`); the
// session launcher (lazaret-init, ocispec.LaunchIdentified) writes its
// stat line there just before it execs the command in place, which keeps
// its pid, group and start time. The guest's /proc is the only source of
// an exact start time; reading it this way costs no second `runsc exec`
// (about 50 ms here) before the session's first output. The release's
// checks of the recorded leader still read it with a short `runsc exec`
// of cat (guestStat), unless the exec client has already returned the
// leader's own status (then the leader is gone: leaderCollected).
//
// One event loop per session serializes client frames (input, resize,
// interrupt/quit/suspend/continue), the end of PTY output and exec-client
// completion. PTY output has no user-space queue: one pump per session
// reads the master (aggregated up to termFrameMax per read) only while the
// route is the sandbox route and writes each read as one Output frame
// straight from its buffer (control.WriteOutput), so a slow client or
// another route (Prompt, HostProcess: Routes) stops reading
// the master and the kernel PTY buffer pushes back on the guest. Input,
// resize and signal events are admitted only on the sandbox route. Input
// waits for the PTY writer by not reading more client frames; group
// signals go through a bounded worker (SIGWINCH coalesced). Sessions never
// share a queue, a goroutine or a connection.
//
// Close: exec-client exit → the close handshake (the shown prompt is
// cancelled, a running host process killed, reaped, audited and answered)
// → drain the master in order until EOF or the drain deadline → exactly
// one Exit after the last byte (preceded, when the exec client's end was
// the sandbox stopping under it, by the reason on its own lines:
// Session.SandboxStopped). Release (close,
// lost connection, PTY or exec loss): RecordReleaseIntent; while the exact
// guest leader (pid and start time) still leads the group: SIGHUP, grace,
// SIGTERM, grace, SIGKILL to that group (`runsc kill --pgid`); SIGKILL and
// reap the exact exec client through its pidfd; close the master;
// RecordClean only when the group, the exec client and the PTY are absent.
package sessionterm
