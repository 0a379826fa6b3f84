// Package store is the Domain Store (spec §3.5 "Durable generation document
// refinement", FR-17, FR-21): one pebble instance per Domain Root, in
// <DomainRoot>/store, opened only by the Host Coordinator that holds the
// Domain flock. No other process opens it, not even to read: the CLI, RS,
// recovery observers and status tools ask HC over its IPC, or become HC.
//
// # Caller contract (HC)
//
//	lock := <the locked <DomainRoot>/lifecycle.lock descriptor>
//	st, err := store.Open(domainRoot, lock, store.DomainIdentity{...}, store.Options{Logger: lg})
//	// Open refuses (errdefs.ErrRefused) unless lock is that file and this
//	// descriptor holds its exclusive flock; it reads the schema version key
//	// first and refuses a newer schema before reading anything else, then
//	// verifies the stored Domain identity (SR-11), then migrates an older
//	// schema; a fresh store is initialized with the identity.
//	err = st.Update(func(tx *store.Tx) error {
//		return tx.PutParticipant(gen, participant.Sandbox, participant.Intent, nil)
//	})
//	// One Update = one pebble batch committed with pebble.Sync: all of it or
//	// none of it survives a crash. Every Tx mutator checks the transition
//	// (pkg/participant) and the cross-record rules before it writes; a
//	// refused mutator writes nothing, and the caller should return its error
//	// so that the whole Update is discarded.
//	err = st.View(func(tx *store.Tx) error { ... }) // consistent read-only snapshot
//	st.Close()
//
// Updates are serialized by the Store; a Tx must not be used after its
// function returns.
//
// Tx mutators (each refuses with errdefs.ErrRefused and then writes nothing):
//
//	CreateGeneration(NewGeneration)                       g/<gen>
//	PutParticipant(gen, role, phase, *v1.RoleSnapshotV1)   Intent, growth, active phase
//	StageProcess(gen, role, slot, pidfs.Identity)         broker step 6 (proc.Spec.Stage)
//	CommitProcess(gen, role, slot, pidfs.Identity)        step 9, or a direct existing-process edge
//	ReleaseParticipant(gen, role)                         -> ReleaseIntent, snapshot kept
//	CleanParticipant(gen, role, participant.AbsenceProof)  -> Clean, everything cleared
//	PutSessionTerminal, StageSessionProcess, CommitSessionProcess,
//	ReleaseSessionTerminal, CleanSessionTerminal          the same for t/<gen>/<session>
//	PutMailbox(gen, *v1.GenerationMailboxRecordV1)        x/<gen>
//
// Readers: Generation, Generations, LatestGeneration, Participant,
// Participants, SessionTerminal, SessionTerminals, Mailbox, and
// CheckLeaseReleaseIntent (the Domain-side recheck that pkg/catalog's
// ReleaseLease calls under storage-catalog.lock). The transition rules are
// pkg/participant's; the cross-record rules (generation boot, exact direct
// owners, lease/anchor ordering, network and publication preconditions, no
// ownership in the transaction that creates an intent) are documented on
// PutParticipant and in docs/SCHEMA.md. The store never inspects physical resources: callers pass
// evidence in (identities, absence proofs) and the store refuses what the
// rules forbid.
//
// # Key schema (schema version 2)
//
// Keys are byte strings; <gen> is the generation number as 8 big-endian
// bytes so that a generation's records sort together and in order. Values are
// protobuf records from api/lazaret/v1/store.proto, each with record_version.
//
//	v                            SchemaVersionV1            read first, written last
//	d                            DomainIdentityRecordV1     Domain ID, profile, canonical workspace
//	g/<gen>                      GenerationRecordV1         generation identity, minted IDs, boot, HC
//	p/<gen>/<role>               ParticipantRecordV1        role = prepared_lower | state_anchor |
//	                                                        git_routing | network | helper |
//	                                                        sandbox | publication
//	t/<gen>/<session id>         SessionTerminalRecordV1    one per Client Session terminal
//	x/<gen>                      GenerationMailboxRecordV1  the generation's Escalation Mailbox
//	s                            SettledThroughV1           the recovery watermark
//
// Retention: Close deletes the g/, p/, t/ and x/ records of every generation
// at or below both the recovery watermark and the latest generation less
// RetainedGenerations (one range deletion per prefix, made durable by the
// flush that follows). Those generations are settled — Clean everywhere,
// their leases released — and no recovery reads them again; an unsettled
// or retained generation is kept however old, and the latest one always,
// so generation numbers keep rising. The store's size is thereby bounded
// by the window, not by the number of starts.
//
// Schema history: v1 recorded process slots as PID/start-only values
// (ProcessSlotV1.schema_v1_pid_start); migration 1 -> 2 rewrites each one to
// Committed(LegacyUnverified), which never becomes authority. Every migration
// step is one synced batch that rewrites and validates its rows and writes
// the version key last. docs/SCHEMA.md describes every record.
//
// Each participant phase change an Update commits is logged at debug level
// ("participant phase recorded": generation, participant, from, phase), after the
// batch is durable and in the order the transaction wrote it; writes that
// keep the phase and transactions that do not commit log nothing. With
// LAZARET_DEBUG=1 hc.log keeps these lines, which tie the coordinator's
// declared teardown steps to the transitions the store really made.
//
// # Pebble
//
// The store pins FormatMajorVersion (FormatMajorVersion below) and installs a
// Logger whose Fatalf records the Domain ID and the current generation
// through the injected slog.Logger and then panics with *FatalError. Pebble
// calls Fatalf only when it cannot continue and assumes Fatalf does not
// return, so returning is not an option; the store never calls os.Exit.
//
// Close flushes the memtable before it closes pebble, so that the next Open
// (on the cold-start path) has no WAL to replay into a new L0 table; a store
// that was not closed recovers from its WAL, each Update having been synced
// there when it committed.
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Process identity and durable state
//
// `pkg/pidfs`: `PidfsProcessIdentityV1` = boot ID + pidfs `st_dev`/`st_ino`
// (authority), host pid (locator), start time (negative evidence). A retained
// pidfd is the only handle used to wait, signal or query a process; waits go
// through Go's poller on the pidfd and reap with `waitid(P_PIDFD)`, so no reap
// can take another child's status. `pkg/proc` is the single spawn/reap broker
// of each process; `pkg/procguard` proves no other code spawns, waits or
// signals. `pidfs.RecoveryMatch` is PidfsRecoveryMatch: boot fence, host PID
// namespace check, one `pidfd_open`, exact `fstat` comparison, start time as
// negative evidence only. The only numeric-pid operations left are `runsc
// kill --pid/--pgid` of a guest pid inside the sandbox's own PID namespace
// (the sentry delivers it to the guest) and `newuidmap <pid>` of an
// unreaped, barrier-held child.
//
// runsc's own host processes are no exception. `runsc kill --all` (for a
// container runsc believes Created) and `runsc delete` (always, with or
// without `-force`) SIGKILL the sandbox and gofer pids of runsc's state file,
// so Lazaret never runs them (`pkg/runsc` cannot build them; `pkg/procguard`
// rejects such an argv anywhere). The sandbox (sentry, the init of its own
// PID namespace, so the systrap stubs die with it) and the gofer are direct
// children of the attached `runsc run` client. Once the init is ready, RS
// reads their pids from the state file as locators only and proves each with
// `pidfs.OpenChildOf`: its parent pid, read through its own pidfd
// (`PIDFD_GET_INFO`), is the client's, and a later non-reaping `waitid` on
// the client's pidfd shows the client was still RS's unreaped child, so its
// pid named nobody else. RS keeps those pidfds, reports the identities in
// `SandboxReady`, and at teardown signals them only through the pidfds; HC
// records them on the sandbox participant's descendant-edge slots
// (`runsc_sandbox`, `runsc_gofer`: never staged, committed with the
// committed client). When the three are proven gone (handles, or
// PidfsRecoveryMatch of the recorded identities), the state and lock files
// and the control socket are removed by `runsc.RemoveState` — all `runsc
// delete` removes for Lazaret's sandboxes. A generation that crashed before
// `SandboxReady` recorded them (or a record of an earlier build) is checked
// by `pidfs.AwaitLocatorsGone` only: after the boot fence, each state pid
// must become free within the bounded recovery wait; a pid still held is
// never signalled (it may be the sandbox or a process that reused the
// number), the record is retained with the pid and the fix, and the runsc
// state is kept (the runtime directory's cleanup keeps it too) until a later
// start finds the pid free.
//
// The Domain Store (`pkg/store`, pebble, one instance in the Domain Root,
// opened only by the HC holding the Domain lock; schema in its package doc and
// docs/SCHEMA.md) records, one synced batch per transition, and refuses every
// illegal transition itself (`pkg/participant`):
//
//  1. at start: the generation (number, fingerprint, coordinator ID, minted
//     sandbox ID, HC's own identity) and the sandbox participant's bare Intent,
//     before any resource of the generation exists;
//  2. the RS wrapper's identity as Staged (acquisition step 6) before its
//     barrier is released; the attached runsc's identity, sent by RS in
//     `StagedProcessOwnership`, as Staged before HC acknowledges it;
//  3. on `SandboxReady`: one transaction promoting both to Committed with the
//     container ID, and recording runsc's sandbox and gofer Committed
//     (descendant edge) — Staged never satisfies the active phase;
//  4. each interactive session's Session Terminal: Intent, the exec client
//     Staged, Running with PTY, container and guest group, ReleaseIntent,
//     Clean after the group, exec client and PTY are gone;
//  5. at teardown: ReleaseIntent (identities kept) before RS is stopped, Clean
//     with an absence proof naming every recorded authority once RS is reaped
//     and the attached runsc, its sandbox and gofer are matched absent.
//
// Bootstrap recovery (`pkg/hc/durable.go`): a new HC (it holds the Domain lock,
// which RS also holds until it exits, so no supervisor of the Domain lives)
// walks every earlier generation whose sandbox is not Clean, proves each
// recorded process absent through PidfsRecoveryMatch (waiting, bounded, for a
// matched survivor, then stopping it through the matched pidfd) — the
// runsc sandbox and gofer included, or, if they were never recorded, their
// state pids proven free (above) —, removes the container's runsc state,
// cleans its Session Terminals and records Clean. Legacy, ambiguous or
// unprovable records are retained and shown by `lazaret status` (and
// hc.log); their runsc state stays; nothing is signalled by number. The Storage Catalog
// (`pkg/catalog`, schema 2: prepared artifacts with their source image
// identity, prepare intents / preparation operations and
// `(artifact, Domain, generation)` leases under `storage-catalog.lock`, one
// transaction per open) implements the §3.5 orderings; HC calls it for the
// prepared-lower lease (package anchor's doc) and `lazaret gc` for reclamation.
package store
