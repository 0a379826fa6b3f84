// Package escalation is the host escalation role of the Host Coordinator:
// the generation's Escalation Mailbox watcher, per-session decision routing,
// host execution through the causal broker, and chunked, acknowledged result
// delivery. Model actions (tla/MAPPING.md): ReceiveEscalation (ingest),
// AutoApprove / QueuePrompt / BeginPrompt / DeveloperApprove / DeveloperDeny
// (decide), StartHostExecution / CompleteHostExecution / FailHostExecution /
// CancelRequest / TimeoutRequest (execute), DeliverResult (finish).
//
// The coordinator keeps one *Service per generation (New, Close) and reaches
// it through a narrow seam: Config names what the role needs from the
// coordinator (its live sessions, the broker that launches host processes,
// the model-trace lock and session keys), never the coordinator itself. An
// interactive session's terminal loop serves the role's prompts and the
// HostProcess route through Routing, given a Terminal (its route and its
// client connection). The role keeps no Domain Store record: a generation's
// mailbox lives in the runtime directory and a dead generation's is removed
// when the next one starts (New); its host processes die with the
// coordinator (the broker's parent-death signal).
//
//	sandbox: lazaret-escalate -- ARGV          HC (this package)                         CLI of the requesting session
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
//     (`Routing`, routing.go) takes one prompt at a time and, while it is
//     shown, neither reads the PTY nor forwards input (route Prompt). The CLI
//     diverts its terminal input to the prompt. After the decision the route is
//     the sandbox route again until the host command may start.
//   - HostProcess route (StartHostExecution … CompleteHostExecution, also
//     for auto-approved requests, as in the model): before the worker acquires
//     the host process it hands the terminal loop a `HostRun` over the
//     session's prompt port (`Service.hostRoute`); the loop takes it only
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
//   - Close handshake (`Routing.Close`): closing (exec-client
//     exit), a lost connection or PTY closes the port — a worker waiting to
//     show a prompt or to start a host process gets `closed` and answers
//     CANCELLED (`the session closed before the host command started`), also
//     for a decision the loop took just before the close; the stop is checked
//     again at the launch barrier (the `Stage` step), so a host command stopped
//     there never runs an instruction. A running host process is stopped
//     (`HostRun.requestStop`) and the loop waits until the worker has killed
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
package escalation
