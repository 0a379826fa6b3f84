package sessionterm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

var testBoot = pidfs.BootID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

// ident returns a distinct pidfs identity per ino on the test boot.
func ident(ino uint64) pidfs.Identity {
	return pidfs.Identity{Authority: pidfs.Authority{BootID: testBoot, Dev: 0x10, Ino: ino}, HostPID: uint32(4000 + ino), StartTimeTicks: 1234 + ino}
}

var (
	hcProc    = ident(1)
	rsProc    = ident(2)
	runscProc = ident(3)
	helpProc  = ident(4)
	anchorD   = ident(5)
	execProc  = ident(7)
)

// openStore opens a Domain Store in a locked temporary Domain Root.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, _, _ := openStoreIn(t)
	return s
}

// openStoreIn is openStore, also returning the Domain Root and its lock.
func openStoreIn(t *testing.T) (*store.Store, string, *os.File) {
	t.Helper()
	root := t.TempDir()
	f, err := os.OpenFile(filepath.Join(root, store.LockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	id := store.DomainIdentity{ID: domain.DeriveID("default", "/home/dev/ws"), Profile: "default", CanonicalWorkspace: "/home/dev/ws"}
	s, err := store.Open(root, f, id, store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, root, f
}

func str(s string) *string { return &s }

// startGeneration records generation n up to its sandbox Committed with
// container ctr-1 (what a Session Terminal's Running needs), through the
// store's acquisition orderings.
func startGeneration(t *testing.T, s *store.Store, n uint64) {
	t.Helper()
	fp := []byte("fp-config")
	netns := &v1.NamespaceIdentity{Dev: 4, Ino: 4026532000}
	mount := &v1.MountIdentityV1{MountId: 99, FsDev: 0x2a, MountPoint: &v1.FileIdentityV1{Dev: 1, Ino: 2, PathHint: "/x/anchor"}}
	pl := func(st v1.LeaseState) *v1.RoleSnapshotV1 {
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_PreparedLower{PreparedLower: &v1.PreparedLowerSnapshotV1{PreparedArtifactId: str("pl-1"), LeaseState: &st}}}
	}
	sb := func(container string, hc, rs, runsc *v1.ProcessSlotV1) *v1.RoleSnapshotV1 {
		s := &v1.SandboxSnapshotV1{Coordinator: hc, Supervisor: rs, Runsc: runsc}
		if container != "" {
			s.ContainerId = str(container)
		}
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Sandbox{Sandbox: s}}
	}
	sa := func(withMount bool, daemon *v1.ProcessSlotV1) *v1.RoleSnapshotV1 {
		a := &v1.StateAnchorSnapshotV1{Daemon: daemon, PreparedArtifactId: str("pl-1")}
		if withMount {
			a.Mounts = &v1.StateAnchorMountsV1{MountNamespace: &v1.NamespaceIdentity{Dev: 4, Ino: 4026531841},
				Anchors: []*v1.AnchorMountV1{{GuestPath: "/usr", MountId: mount.MountId, Target: mount.GetMountPoint().GetPathHint()}}}
		}
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_StateAnchor{StateAnchor: a}}
	}
	helper := func(h, rs *v1.ProcessSlotV1) *v1.RoleSnapshotV1 {
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Helper{Helper: &v1.HelperSnapshotV1{Helper: h, Supervisor: rs}}}
	}
	net := func(rs *v1.ProcessSlotV1, ready bool) *v1.RoleSnapshotV1 {
		ns := &v1.NetworkSnapshotV1{Netns: netns, Supervisor: rs}
		if ready {
			ns.ReadinessFingerprint = []byte("fp-ready")
			ns.Readiness = &v1.NetworkReadinessEvidenceV1{Generation: n, ReadinessFingerprint: []byte("fp-ready"), Netns: netns,
				Supervisor: store.IdentityProto(rsProc), DenyObserved: true, PermitObserved: true, DnsObserved: true}
		}
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Network{Network: ns}}
	}
	put := func(r participant.Role, p participant.Phase, snap *v1.RoleSnapshotV1) func(tx *store.Tx) error {
		return func(tx *store.Tx) error { return tx.PutParticipant(n, r, p, snap) }
	}
	steps := []func(tx *store.Tx) error{
		func(tx *store.Tx) error {
			return tx.CreateGeneration(store.NewGeneration{Number: n, ConfigurationFingerprint: fp, CoordinatorID: fmt.Sprintf("hc-%d", n),
				ComponentIDs: []store.ComponentID{{Kind: "supervisor", ID: "rs-1"}, {Kind: "container", ID: "ctr-1"}}, Coordinator: hcProc})
		},
		put(participant.PreparedLower, participant.Intent, pl(v1.LeaseState_LEASE_STATE_INTENT)),
		put(participant.PreparedLower, participant.LeaseHeld, pl(v1.LeaseState_LEASE_STATE_HELD)),
		put(participant.Sandbox, participant.Intent, nil),
		put(participant.Sandbox, participant.Intent, sb("", nil, store.StagedSlot(rsProc), nil)),
		put(participant.Sandbox, participant.Intent, sb("", nil, store.CommittedSlot(rsProc), nil)),
		put(participant.StateAnchor, participant.Intent, nil),
		put(participant.StateAnchor, participant.Intent, sa(false, store.StagedSlot(anchorD))),
		put(participant.StateAnchor, participant.Prepared, sa(true, store.CommittedSlot(anchorD))),
		put(participant.Helper, participant.Intent, nil),
		put(participant.Helper, participant.Intent, helper(store.StagedSlot(helpProc), nil)),
		put(participant.Helper, participant.Committed, helper(store.CommittedSlot(helpProc), store.CommittedSlot(rsProc))),
		put(participant.Network, participant.Intent, nil),
		put(participant.Network, participant.Intent, net(store.CommittedSlot(rsProc), false)),
		put(participant.Network, participant.Committed, net(store.CommittedSlot(rsProc), true)),
		put(participant.Sandbox, participant.Intent, sb("ctr-1", nil, store.CommittedSlot(rsProc), store.StagedSlot(runscProc))),
		put(participant.Sandbox, participant.Committed, sb("ctr-1", store.CommittedSlot(hcProc), store.CommittedSlot(rsProc), store.CommittedSlot(runscProc))),
	}
	for i, step := range steps {
		if err := s.Update(step); err != nil {
			t.Fatalf("start step %d: %v", i, err)
		}
	}
}

func terminalRecord(t *testing.T, s *store.Store, g uint64, id string) *store.SessionTerminal {
	t.Helper()
	var st *store.SessionTerminal
	if err := s.View(func(tx *store.Tx) error {
		var err error
		st, err = tx.SessionTerminal(g, id)
		return err
	}); err != nil {
		t.Fatalf("session %s: %v", id, err)
	}
	return st
}

func wantPhase(t *testing.T, s *store.Store, g uint64, id string, want participant.Phase) *store.SessionTerminal {
	t.Helper()
	st := terminalRecord(t, s, g, id)
	if st.Phase != want {
		t.Fatalf("session %s: phase %s, want %s", id, st.Phase, want)
	}
	return st
}

func runningIdentity(id string) Identity {
	return Identity{SessionID: id, Generation: 1, Container: "ctr-1", ExecClient: execProc, PTY: "pts/3", GuestLeaderPID: 12, GuestLeaderStart: 99, GuestPGID: 12}
}

// TestStoreRecorderLifecycle drives a Session Terminal record through the
// Recorder interface: Intent → Staged → Running → ReleaseIntent → Clean,
// with the identities the store keeps at each step.
func TestStoreRecorderLifecycle(t *testing.T) {
	s := openStore(t)
	startGeneration(t, s, 1)
	ctx := context.Background()
	var r Recorder = StoreRecorder{Store: s, Generation: 1, Coordinator: hcProc}
	if err := r.RecordIntent(ctx, "s1", 1); err != nil {
		t.Fatal(err)
	}
	if st := wantPhase(t, s, 1, "s1", participant.Intent); st.Snapshot != nil {
		t.Fatalf("bare intent has a snapshot: %v", st.Snapshot)
	}
	if err := r.RecordStaged(ctx, "s1", execProc); err != nil {
		t.Fatal(err)
	}
	st := wantPhase(t, s, 1, "s1", participant.Intent)
	if slot := st.View.Slots["exec_client"]; slot.State != participant.Staged || slot.Identity != execProc {
		t.Fatalf("exec client slot %+v, want staged %s", slot, execProc)
	}
	// Running on another container than the generation's is refused.
	bad := runningIdentity("s1")
	bad.Container = "ctr-2"
	if err := r.RecordRunning(ctx, bad); err == nil {
		t.Fatal("Running with a foreign container recorded")
	}
	if err := r.RecordRunning(ctx, runningIdentity("s1")); err != nil {
		t.Fatal(err)
	}
	st = wantPhase(t, s, 1, "s1", participant.Running)
	if slot := st.View.Slots["exec_client"]; slot.State != participant.CommittedSlot {
		t.Fatalf("exec client slot %+v, want committed", slot)
	}
	g := st.Snapshot.GetGuest()
	if g.GetLeaderPid() != 12 || g.GetLeaderStartTimeTicks() != 99 || g.GetPgid() != 12 || st.Snapshot.GetPty().GetPtsIndex() != 3 || st.Snapshot.GetContainerId() != "ctr-1" {
		t.Fatalf("running snapshot %v", st.Snapshot)
	}
	if err := r.RecordReleaseIntent(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	st = wantPhase(t, s, 1, "s1", participant.ReleaseIntent)
	if st.Snapshot.GetGuest().GetPgid() != 12 {
		t.Fatalf("release intent dropped the guest group: %v", st.Snapshot)
	}
	// A second release intent (release after a failed clean) is a no-op.
	if err := r.RecordReleaseIntent(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordClean(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, s, 1, "s1", participant.Clean)
	// Release of a session that never recorded anything is a no-op.
	if err := r.RecordReleaseIntent(ctx, "never"); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordClean(ctx, "never"); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRecorderFailureBeforeRunning: a session that fails after its
// exec client was staged (identification failed) is released and cleaned
// without ever being Running; a bare Intent is cleaned directly.
func TestStoreRecorderFailureBeforeRunning(t *testing.T) {
	s := openStore(t)
	startGeneration(t, s, 1)
	ctx := context.Background()
	r := StoreRecorder{Store: s, Generation: 1, Coordinator: hcProc}
	for _, step := range []error{r.RecordIntent(ctx, "s1", 1), r.RecordStaged(ctx, "s1", execProc), r.RecordReleaseIntent(ctx, "s1")} {
		if step != nil {
			t.Fatal(step)
		}
	}
	wantPhase(t, s, 1, "s1", participant.ReleaseIntent)
	if err := r.RecordClean(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, s, 1, "s1", participant.Clean)

	for _, step := range []error{r.RecordIntent(ctx, "s2", 1), r.RecordReleaseIntent(ctx, "s2")} {
		if step != nil {
			t.Fatal(step)
		}
	}
	wantPhase(t, s, 1, "s2", participant.Intent) // nothing owned: nothing to release
	if err := r.RecordClean(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, s, 1, "s2", participant.Clean)
}

// TestRecoverDeadGeneration: a coordinator that died leaves Session
// Terminal records in every phase; recovery cleans each one whose exec
// client is proven absent and retains (with the reason) one whose exec
// client is not.
func TestRecoverDeadGeneration(t *testing.T) {
	s := openStore(t)
	startGeneration(t, s, 1)
	ctx := context.Background()
	r := StoreRecorder{Store: s, Generation: 1, Coordinator: hcProc}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// bare: Intent only. staged: exec client staged. running: Running.
	// released: ReleaseIntent after Running. clean: already Clean.
	// alive: Running, its exec client not proven absent.
	must(r.RecordIntent(ctx, "bare", 1))
	must(r.RecordIntent(ctx, "staged", 1))
	must(r.RecordStaged(ctx, "staged", execProc))
	alive := ident(8) // the alive session's exec client is another process
	for _, id := range []string{"running", "released", "clean", "alive"} {
		run := runningIdentity(id)
		if id == "alive" {
			run.ExecClient = alive
		}
		must(r.RecordIntent(ctx, id, 1))
		must(r.RecordStaged(ctx, id, run.ExecClient))
		must(r.RecordRunning(ctx, run))
	}
	must(r.RecordReleaseIntent(ctx, "released"))
	must(r.RecordReleaseIntent(ctx, "clean"))
	must(r.RecordClean(ctx, "clean"))

	var checked []pidfs.Identity
	refusals := Recover(s, 1, func(id pidfs.Identity) error {
		checked = append(checked, id)
		if id == alive {
			return errors.New("still alive after SIGKILL")
		}
		return nil
	})
	if len(refusals) != 1 || !strings.Contains(refusals[0], "session alive") || !strings.Contains(refusals[0], "still alive") {
		t.Fatalf("refusals %q, want one for session alive", refusals)
	}
	// Every non-Clean record with an exec client had it checked: staged,
	// running, released, alive (not bare: it owns none; not clean).
	if len(checked) != 4 {
		t.Fatalf("checked %d exec clients, want 4: %v", len(checked), checked)
	}
	for _, id := range []string{"bare", "staged", "running", "released", "clean"} {
		wantPhase(t, s, 1, id, participant.Clean)
	}
	st := wantPhase(t, s, 1, "alive", participant.Running)
	if st.Snapshot.GetGuest().GetPgid() != 12 || st.View.Slots["exec_client"].Identity != alive {
		t.Fatalf("retained record lost its identities: %v", st.Snapshot)
	}

	// A later recovery (the process is gone now) cleans it.
	if refusals := Recover(s, 1, func(pidfs.Identity) error { return nil }); len(refusals) != 0 {
		t.Fatalf("second recovery: %q", refusals)
	}
	wantPhase(t, s, 1, "alive", participant.Clean)
}
