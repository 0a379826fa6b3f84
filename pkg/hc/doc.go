// Package hc is the Host Coordinator role: the constitutive Session
// Coordinator process in the host user and mount namespaces. It holds the
// Domain lock (inherited from the CLI that started it), the control socket
// (the protocol face), the generation's identity, and lifetime authority over
// the Runtime Supervisor, which it spawns through its broker into new
// user+mount+network namespaces with the developer's full subordinate id map.
// Sessions run as non-detached `runsc exec` clients started from the host
// namespaces, their stdio relayed to the Client CLI.
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
//     exec wrapper through `broker.Acquire` → guest leader pid from
//     `--internal-pid-file`, its process group and start time from the guest's
//     `/proc/<pid>/stat` (a short `runsc exec cat`; `runsc ps` has only
//     minutes) with pgid = pid checked → `Running` → `Accepted`, and only then
//     are events admitted. `sessionterm.Recorder` records each step in the
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
//     audited and answered (`terminalPrompts.close`, below) → drain the master
//     until EOF or `DrainTimeout` → one `Exit` after the last byte. A lost
//     connection or PTY ends the escalation the same way before the release. Release (also on a
//     lost connection): `ReleaseIntent`; while the exec client runs and the
//     leader still matches (pid, start time, pgid): SIGHUP, grace, SIGTERM,
//     grace, SIGKILL to the group; SIGKILL of the exact exec client by pidfd;
//     close the master; `Clean` only if `runsc ps` shows the group empty,
//     otherwise the record stays in release for Domain teardown.
//   - CLI (`cmd/lazaret/cli/terminal.go`): raw mode after `Accepted` —
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
// # Host escalation
//
//	sandbox: lazaret-escalate -- ARGV          HC (pkg/hc/escalation.go)                 CLI of the requesting session
//	  sign EscalationRequest (sandbox key) ─▶ requests/<id>.req  (rename)
//	                                        watcher: confined read (pkg/mailbox), record.Open with the
//	                                        sandbox key before parsing, generation, replay, capability →
//	                                        session; per-session queue (one active request)
//	                                        auto_approve rule (exact/prefix argv, cwd; never a
//	                                        command that requires a shell)? ─ yes ────────────┐
//	                                        interactive? ─ no ─▶ Denied ("no terminal")        │
//	                                        terminal loop: route Prompt ── EscalationPrompt ─▶ prompt.go renders, reads y/n/e
//	                                                                     ◀─ SignedDecision ── signed by the Session Anchor
//	                                        record.VerifyDecision (anchor of the capability)   │
//	                                        broker.Acquire("escalation_exec", exec stop): execve ◀┘
//	  read <seq>.chunk, write, ack ◀──────── results/<id>/<seq>.chunk (≤ 8 unacked, 48 KiB)
//	  read result, final ack, exit status ◀─ results/<id>/result (exactly one)
//
// In detail:
//
//   - Records (`pkg/escalate/record`, `api/lazaret/v1/escalation.proto`):
//     one envelope, signature over `lazaret/v1/<name>` + length + payload,
//     verified before parsing; bounds 65,536 bytes per record, 49,152 output
//     bytes per chunk. Signers: the sandbox key (request, cancellation, ack),
//     the Session Anchor (decision), the coordinator protocol key (chunk,
//     result). Schema in docs/SCHEMA.md.
//   - Mailbox: `<runtime>/mailbox/g<gen>/{requests,results}`, bound at
//     `/.lazaret/mailbox/requests` (rw, noexec) and `/.lazaret/mailbox/results`
//     (ro); `ocispec.Check` allows exactly that one writable Lazaret mount. HC
//     scans the request directory when inotify reports an entry (the sandbox's
//     rename reaches the host directory; `mailbox.Watcher`), and every second
//     in case; without inotify it polls (2 ms after activity, 10 ms idle). At
//     most 512 entries a pass; refusals are logged and audited (rate-limited).
//     The client polls its result directory every 2 ms (inotify inside gVisor
//     does not see the host's writes).
//   - Routing: a request reaches only its session's worker (the capability
//     names the session); an interactive session's terminal loop
//     (`escalation_terminal.go`) takes one prompt at a time and, while it is
//     shown, neither reads the PTY nor forwards input (route Prompt). The CLI
//     diverts its terminal input to the prompt. After the decision the route is
//     the sandbox route again until the host command may start.
//   - HostProcess route (StartHostExecution … CompleteHostExecution, also
//     for auto-approved requests, as in the model): before the worker acquires
//     the host process it hands the terminal loop a `hostRun` over the
//     session's prompt port (`escalations.hostRoute`); the loop takes it only
//     on the sandbox route of a session that is not closing, switches to
//     `RouteHostProcess`, sends `HostProcessStarted` and only then lets the
//     worker release the process. Until the exact process is gone (exited, or
//     killed and reaped) the PTY is not read and input, resize and signal
//     events are refused; the worker then reports `HostProcessEnded` (outcome,
//     status) and the loop restores the sandbox route, so output held in the
//     kernel PTY follows the end frame in order. The host command's output
//     still reaches the requester through the mailbox. A client whose stdout
//     or stderr is a terminal (the session's own PTY, not read meanwhile)
//     queues that output in its memory (`escalate.spool`, up to 64 MiB, in
//     order across both streams) instead of blocking on the terminal, so it
//     keeps acknowledging chunks and the command completes; the output reaches
//     the terminal once the route is restored
//     (`TestSpec37LargeOutputAtTerminal`, 3 MiB). The CLI writes
//     the status lines on its frame reader (in order with the output), sends
//     no keystroke meanwhile and turns Ctrl-C into `HostProcessCancel`, which
//     the loop takes only on the HostProcess route of that request
//     (CancelRequest); it sends its window size again after the end. A session
//     without a terminal has no route to hold.
//   - Close handshake (`terminalPrompts.close`): closing (exec-client
//     exit), a lost connection or PTY closes the port — a worker waiting to
//     show a prompt or to start a host process gets `closed` and answers
//     CANCELLED (`the session closed before the host command started`), also
//     for a decision the loop took just before the close; the stop is checked
//     again at the launch barrier (the `Stage` step), so a host command stopped
//     there never runs an instruction. A running host process is stopped
//     (`hostRun.requestStop`) and the loop waits until the worker has killed
//     its process group, reaped it, appended the `result` line (`cancelled`,
//     `the session closed while the host command ran`) and published the
//     result; it sends `HostProcessEnded` and only then drains the PTY and
//     sends `Exit`. `TestCloseWindowDecisionStartsNothing` and
//     `TestCloseKillsHostProcessBeforeExit` drive this with injected order
//     (unbuffered client frames, worker hooks, the exec client's stdin).
//   - Execution: the program is resolved without a shell (a name in the
//     fixed host PATH, or a path), the working directory is the host workspace
//     directory reached with `openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)`, the
//     environment is minimal (docs/CONFIG.md); the child is acquired through
//     the causal broker (parent-death signal: HC loss kills it). Each output pipe
//     has one reader holding at most one 48 KiB buffer; with eight chunks
//     unacknowledged they are not read. Cancellation (the requester's signed
//     one or the developer's `HostProcessCancel`), session close or loss and
//     the acknowledgement timeout (10 s without an ack; the client re-acks
//     every second) kill the process group the command leads (`Setsid`)
//     through its pidfd (`pidfd_send_signal` with
//     `PIDFD_SIGNAL_PROCESS_GROUP`, `proc.(*Child).SignalGroup`) and reap the
//     exact process before the result is written and the chunks removed.
//     Teardown ends every request.
//   - Audit: `pkg/audit`, `<Domain Root>/audit.jsonl`, `lazaret audit`.
//     A line is fsynced before its consequence: the request and an auto-rule
//     decision are written unsynced and made durable by the execution's line
//     (synced at acquisition step 6, before the process is released) or by the
//     result's line (synced before the result is published); a prompt syncs
//     first. One round trip of an auto-approved command costs two fsyncs.
//   - Timing: `LAZARET_ESCALATE_TIMING=1` makes the client print its own
//     stages and the protocol round trip (request built → verified result) to
//     stderr; HC logs `decide_us`, `acquire_us`, `run_us`, `since_received_us`.
//     `make bench` reports both the round trip and the wall time with the
//     client's process start.
package hc
