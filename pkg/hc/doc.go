// Package hc is the Host Coordinator role: the constitutive Session
// Coordinator process in the host user and mount namespaces. It holds the
// Domain lock (inherited from the CLI that started it), the control socket
// (the protocol face), the generation's identity, and lifetime authority over
// the Runtime Supervisor, which it spawns through its broker into new
// user+mount+network namespaces with the developer's full subordinate id map.
// Sessions run as non-detached `runsc exec` clients started from the host
// namespaces, their stdio relayed to the Client CLI, except a
// generation's first non-interactive session, which the sandbox's init starts
// (firstsession.go says why and how).
//
// A cold start's CLI usually starts lazaret-hc before it knows it will
// start the Domain, as a standby (StandbyMain, package hcstandby), and
// hands it the start over a socketpair: Main then runs with the same
// arguments, environment and descriptors as in a coordinator started
// directly; its process's command line reads `lazaret-hc --standby
// --workspace=W --profile=P`.
//
// Lifecycle of one generation:
//
//	starting ──RS SandboxReady──▶ running ──last session leaves──▶ stopping ──▶ exit
//	    │                            │
//	    └──RS failure / RS exit──────┴──────────────▶ failed ──▶ stopping
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Terminals
//
// An interactive session (`RunRequest.tty`, sent when the CLI's stdin and
// stdout are terminals; `lazaret run` with no command then runs
// `/bin/sh -c 'if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l'`
// through the in-sandbox launcher) takes a different path in HC
// (package `sessionterm`):
//
//	CLI (raw mode, containerd/console)          HC                                  sandbox
//	 stdin bytes ── StdinData ──────────▶ event loop ── PTY writer ─▶ master ┐
//	 SIGWINCH ──── Resize ──────────────▶   TIOCSWINSZ on master, then        │ slave = stdio + ctty of
//	 SIGINT/QUIT ─ Interrupt/Quit ──────▶   signal worker: runsc kill --pgid  │ runsc exec (terminal: true)
//	 stdout ◀──── Output(STREAM_TERMINAL) ◀ PTY reader ◀──────────── master ◘┘   └─ guest leader (pgid = pid)
//	          ◀── Exit (after the last byte)
//
// In detail:
//
//   - PTY (`pkg/pty`): `/dev/ptmx`, slave opened through `TIOCGPTPEER`
//     (close-on-exec), the master non-blocking in Go's poller (reads with
//     deadlines; one wake-up takes all available bytes, each read(2) a raw
//     non-blocking call without the runtime's syscall bookkeeping; EIO is EOF). The slave
//     keeps the kernel's *cooked* modes: a gVisor guest TTY backed by a host
//     terminal forwards the guest's termios ioctls to it, so echo, line editing
//     and the signal characters are the host line discipline's — Ctrl-C typed
//     in the CLI is a byte that the slave's ISIG turns into SIGINT for the exec
//     client (its session leader, `Setsid`+`Setctty`, a new `proc.Command`
//     field), which runsc forwards to the guest's foreground job. The root
//     `runsc run` stays terminal-neutral; no `--console-socket`.
//   - Session Terminal record (package `sessionterm`): `Intent` → PTY +
//     exec wrapper through `broker.Acquire` (`Staged`, then `Accepted` while
//     the exec client waits at its exec stop) → guest leader pid from
//     `--internal-pid-file`, its process group and start time from the guest's
//     `/proc/<pid>/stat` (a short `runsc exec cat`; `runsc ps` has only
//     minutes) with pgid = pid checked → `Running`, and only then
//     are events admitted. Every session's `Accepted` precedes the point
//     where its command can run (`session.accept`): a CLI that loses its
//     coordinator before `Accepted` starts or joins again, and must never
//     run a command twice. `sessionterm.Recorder` records each step in the
//     Domain Store (`sessionterm.StoreRecorder`, one transaction each). A command that ends
//     before it is identified still gets its output and status but no event.
//   - Event loop: one goroutine per session selects over client frames,
//     the end of PTY output and exec-client exit. PTY output has no user-space
//     queue: one output pump per session reads the master (aggregated until
//     EAGAIN, ≤ 64 KiB with the frame header: four TLS records) only while the route gate is open (route = sandbox; it
//     re-checks before forwarding, so at most one read is held) and writes each
//     read as one `Output` frame straight from its buffer
//     (`control.WriteOutput` encodes header and protobuf prefix in the
//     buffer's headroom). A client that does not read blocks the pump, so the
//     master is not read and the kernel PTY buffer stops the guest. Input waits
//     for the PTY writer (64 chunks) by not reading more frames; group signals
//     go through a worker (8, SIGWINCH coalesced). Sessions share no queue,
//     goroutine or connection. The CLI writes `Output` bytes from its frame
//     read buffer on the reading goroutine (`control.ReadRaw` +
//     `control.ParseOutput`: no copy, no decode, no hand-off per frame); Exit
//     and Error frames follow on a channel, after the last byte.
//   - Relay system calls (`pkg/rawio`): the hot calls of the output path
//     are raw non-blocking read/write on poller-driven descriptors, outside
//     the Go runtime's system-call bookkeeping — the pump's master reads and
//     the control socket's reads and writes on both ends (`rawio.Conn`
//     beneath TLS). An ordinary call after an idle moment wakes the runtime
//     monitor, which then polls for a while. The coordinator
//     also sends each frame in one socket write (`control.NewBatchedConn`:
//     `rawio.Conn` holds the frame's TLS records and flushes them together),
//     so the CLI wakes once per frame, not once per 16 KiB record.
//     What bounds PTY throughput now is kernel work per 4 KiB: a PTY master
//     read returns at most the line discipline's 4 KiB buffer, and every read
//     wakes the writer and a flush worker, on both PTYs in series (the
//     coordinator's and the user's terminal), plus the guest's output
//     processing (ONLCR: two PTY writes per line) in the sentry, all on the
//     same cores.
//   - The CLI's terminal write (`rawio.TerminalWriter`) stays a blocking
//     write: the writer waits inside the kernel and goes on writing as soon
//     as the terminal frees room. Non-blocking writes with a wait in between
//     (in the Go poller or in ppoll) cost two more kernel transitions per
//     wake-up and were slower than os.Stdout. It is entered raw, without the
//     runtime's bookkeeping, which woke the runtime's monitor thread at every
//     frame, and measured faster than os.Stdout. A raw blocking write must not hold
//     its processor while the terminal takes nothing (garbage collection would
//     wait for it, and the kernel restarts a tty write that wrote nothing
//     after every signal). So each write waits for room first, in ppoll,
//     entered raw; a signal ends ppoll. A write that starts with room writes
//     at least one byte, and such a write returns once a signal is pending.
//     The runtime's preemption signal therefore always gets the processor
//     back. TestTerminalWriterStalledStaysPreemptible runs a stalled terminal
//     in a child process and fails if GC or another goroutine freezes, as they
//     do with a plain raw write. The CLI runs interactive sessions with at
//     least two processors, so input and signals keep flowing while the
//     output waits.
//   - The PTY reference (`make bench`, integration/bench_ptyref_test.go):
//     beside the host and Lazaret runs, the benchmark times the same 64 MiB
//     `cat` two more ways, with no Lazaret code. (1) A bare `runsc exec` with
//     `terminal: true` into a bare sandbox over the same busybox lower, on a
//     PTY owned by a minimal relay process; that process takes whatever the
//     master has at each wake-up and hands it over a unix socket to a second
//     minimal process that writes it to the outer terminal (the spec's shape
//     — coordinator-owned session PTY, client relay, the user's terminal —
//     and nothing else: no framing, TLS or event loop; system calls entered
//     raw, like the same loop written in C). (2) The same `runsc exec`
//     straight on the outer terminal: gVisor on one PTY, no relay. Lazaret
//     against (1) is the coordinator's and the CLI's own cost; (1) against the
//     host is gVisor's plus the second PTY the design requires (figures:
//     docs/BENCHMARKS.md).
//   - Routes (the model's `terminalRoute`): `RouteSandbox` forwards PTY
//     output and admits input, resize and signal events; `RoutePrompt` (an
//     escalation prompt is shown) and `RouteHostProcess` (an approved host
//     command of the session runs) close the output gate and refuse those
//     events. Closing the gate takes the pump's forwarding lock, so once the
//     route has changed no `Output` frame is in flight, and sets a read
//     deadline in the past on the master: a pump waiting in a read goes back
//     to waiting for the gate, so the master is not read at all (at most a
//     read already copying bytes completes and is held).
//   - Close: exec-client exit → the close handshake: the session's prompt
//     port closes (no prompt is shown and no host process starts any more),
//     the shown prompt is cancelled, a running host process is killed, reaped,
//     audited and answered (`escalation.Routing.Close`) → drain the master
//     until EOF or `DrainTimeout` → one `Exit` after the last byte. A lost
//     connection or PTY ends the escalation the same way before the release. Release (also on a
//     lost connection): `ReleaseIntent`; while the exec client runs and the
//     leader still matches (pid, start time, pgid): SIGHUP, grace, SIGTERM,
//     grace, SIGKILL to the group; SIGKILL of the exact exec client by pidfd;
//     close the master; `Clean` only if `runsc ps` shows the group empty,
//     otherwise the record stays in release for Domain teardown.
//   - CLI (`cmd/lazaret/runverb/terminal.go`): raw mode after `Accepted` —
//     full raw mode, output processing (OPOST) off too, which containerd/console
//     leaves on: the guest's own terminal already applied the guest's output
//     modes, so the outer terminal gets the bytes unchanged (no CR CR LF); the
//     frame reader writes no output before raw mode is set —
//     restored by `defer` on every return (exit, error, signal, lost HC), and
//     an abnormal end starts a fresh line. SIGINT/SIGQUIT from outside →
//     `Interrupt`/`Quit`; SIGTERM/SIGHUP → leave (HC releases); SIGTSTP or
//     `~^Z` → restore and stop itself (through its own pidfd), SIGCONT → raw
//     again and `Resize`; `~.` disconnects. An interactive CLI never sends
//     `Suspend`: the spec makes its suspension local and keystroke Ctrl-Z
//     already reaches the guest. A non-interactive CLI (`session` in
//     `run.go`) sends SIGINT/SIGQUIT as `Interrupt`/`Quit` and SIGTSTP as
//     `Suspend` followed by stopping itself (pidfd), then `Continue` when
//     continued; HC's non-interactive loop delivers them as SIGINT, SIGQUIT,
//     SIGTSTP, SIGCONT to the exec process's group (`runsc kill --pgid`; a
//     `runsc exec` process leads its own group) through one ordered, bounded
//     worker. SIGTERM/SIGHUP stay `SignalRequest` to the exact process.
//
// # Teardown and recovery
//
// Teardown is one declared list of steps (teardown.go, teardownSteps)
// that the coordinator walks in order. Its durable store transitions are
// not start-up reversed: release intents first, while the runtime still
// runs (publication, sandbox, prepared lower and State Anchors, network
// and helper, Git routing), then RS is stopped and reaped, then the
// cleans with their absence proofs (network and helper, prepared lower
// and State Anchors, Git routing and the sandbox). TestTeardownOrder pins
// that order. Bootstrap recovery (recovery.go) walks its own ordered list
// of participants for each dead generation and keeps what it retained.
//
// # Runtime Supervisor
//
// RS's launch and lifetime are package supervisor (pkg/hc/supervisor): one
// supervisor.Driver per generation, spawned from init (the clone, wrapper
// and id maps run while the store opens and recovery runs), held at its
// barrier until init has created the Trust Anchor and releases the stage,
// finished by startGeneration, aborted when init fails, stopped at
// teardown. The coordinator keeps only the seam (rsstart.go: RS's inputs,
// its staged record and model step, the StartSandbox that answers its
// hello) and the phase machine of the HC↔RS exchange (exchange.go), which
// reads and writes through the Driver.
//
// The coordinator's own model-trace steps (tla/Lazaret.tla vocabulary)
// are package modelsteps, recorded under c.mu (modelsteps.go is the seam).
//
// # Host escalation
//
// The host escalation role (Escalation Mailbox, per-session decision
// routing, host execution, result delivery) is package escalation
// (pkg/hc/escalation), whose documentation describes it in detail. The
// coordinator starts one escalation.Service per generation
// (escalation.go: its sessions, broker and model trace given through
// narrow interfaces) and closes it at teardown; an interactive session's
// terminal loop (package sessionterm) serves the role's prompts and the
// HostProcess route through escalation.Routing, which terminal.go adapts
// to sessionterm.Routes.
//
// # Network Sidecar
//
// The connectivity helper and network participants (policy derivation,
// the helper's start and ready signal, readiness judgement, port forwards,
// the egress proxy's checks, teardown and bootstrap recovery of their
// records) are package network (pkg/hc/network). The coordinator keeps one
// network.Service per generation (network.go: its store, broker, staged
// acknowledgement and failure path given through Config) and answers the
// egress proxy's network asks through the escalation prompt's routing.
//
// # Git routing
//
// The workspace's Git Sentry, the git_routing participant (the daemon RS
// acquires and its mount), the host Git configuration guard and the sticky
// ignored paths are package gitrouting (pkg/hc/gitrouting); routing.go is
// the coordinator's seam (and the staged-ownership acknowledgement every
// RS-acquired role shares). Reading the developer's Git configuration
// (gitconfig.go) stays here: it also gives guest processes the identity.
package hc
