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
//
// Schema history: v1 recorded process slots as PID/start-only values
// (ProcessSlotV1.schema_v1_pid_start); migration 1 -> 2 rewrites each one to
// Committed(LegacyUnverified), which never becomes authority. Every migration
// step is one synced batch that rewrites and validates its rows and writes
// the version key last. docs/SCHEMA.md describes every record.
//
// # Pebble
//
// The store pins FormatMajorVersion (FormatMajorVersion below) and installs a
// Logger whose Fatalf records the Domain ID and the current generation
// through the injected slog.Logger and then panics with *FatalError. Pebble
// calls Fatalf only when it cannot continue and assumes Fatalf does not
// return, so returning is not an option; the store never calls os.Exit.
package store
