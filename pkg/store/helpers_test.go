package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

var (
	testBoot  = pidfs.BootID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	otherBoot = pidfs.BootID{0xff, 1}
	testID    = DomainIdentity{ID: domain.DeriveID("default", "/home/dev/ws"), Profile: "default", CanonicalWorkspace: "/home/dev/ws"}
)

// proc returns a distinct current pidfs identity per ino.
func proc(ino uint64) pidfs.Identity {
	return pidfs.Identity{Authority: pidfs.Authority{BootID: testBoot, Dev: 0x10, Ino: ino}, HostPID: uint32(4000 + ino), StartTimeTicks: 1234 + ino}
}

var (
	hcProc    = proc(1)
	rsProc    = proc(2)
	runscProc = proc(3)
	helpProc  = proc(4)
	anchorD   = proc(5)
	gitD      = proc(6)
	execProc  = proc(7)
)

func fixedClock() func() time.Time {
	t := time.Unix(1_800_000_000, 0)
	return func() time.Time { t = t.Add(time.Second); return t }
}

// lockedRoot creates a Domain Root with its lock file and returns the root
// and the locked descriptor.
func lockedRoot(t testing.TB) (string, *os.File) {
	t.Helper()
	root := t.TempDir()
	f, err := os.OpenFile(filepath.Join(root, LockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return root, f
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type env struct {
	root string
	lock *os.File
	fs   vfs.FS
}

func newEnv(t testing.TB, fs vfs.FS) *env {
	root, lock := lockedRoot(t)
	// On an in-memory fs, pebble creates <root>/store and syncs every parent
	// it creates (as it does on disk for a new Domain Root).
	return &env{root: root, lock: lock, fs: fs}
}

func (e *env) open(t testing.TB) *Store {
	t.Helper()
	s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), Now: fixedClock(), FS: e.fs})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawDB opens the store's pebble directly (tests only: to plant records).
func (e *env) rawDB(t testing.TB) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(filepath.Join(e.root, Dir), &pebble.Options{FS: e.fs, FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quietLogger(), gen: new(atomic.Uint64)}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// rawDBOn opens the store's pebble on another filesystem (a crash clone).
func (e *env) rawDBOn(t testing.TB, fs vfs.FS) *pebble.DB {
	t.Helper()
	c := *e
	c.fs = fs
	return c.rawDB(t)
}

// dump returns every key/value of the store in order.
func dump(t testing.TB, db pebble.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameDump(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func describe(d map[string]string) string {
	var keys []string
	for k := range d {
		keys = append(keys, fmt.Sprintf("%q", k))
	}
	sort.Strings(keys)
	return fmt.Sprint(keys)
}

func mustRefuse(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want refusal", what)
	}
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("%s: %v is not ErrRefused", what, err)
	}
}

func ok(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// --- snapshot builders ---

func fp(s string) []byte { return []byte("fp-" + s) }

func newGen(n uint64) NewGeneration {
	return NewGeneration{Number: n, ConfigurationFingerprint: fp("config"), CoordinatorID: fmt.Sprintf("hc-%d", n),
		ComponentIDs: []ComponentID{{"supervisor", "rs-1"}, {"container", "ctr-1"}}, Coordinator: hcProc}
}

func str(s string) *string { return &s }

func plSnap(artifact string, lease v1.LeaseState) *v1.RoleSnapshotV1 {
	return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_PreparedLower{PreparedLower: &v1.PreparedLowerSnapshotV1{
		PreparedArtifactId: str(artifact), LeaseState: &lease}}}
}

var anchorMount = &v1.MountIdentityV1{MountId: 99, FsDev: 0x2a, MountPoint: &v1.FileIdentityV1{Dev: 1, Ino: 2, PathHint: "/x/anchor"}}

func saSnap(artifact string, mount *v1.MountIdentityV1, daemon *v1.ProcessSlotV1) *v1.RoleSnapshotV1 {
	s := &v1.StateAnchorSnapshotV1{Daemon: daemon}
	if mount != nil {
		s.Mounts = &v1.StateAnchorMountsV1{MountNamespace: &v1.NamespaceIdentity{Dev: 4, Ino: 4026531841},
			Anchors: []*v1.AnchorMountV1{{GuestPath: "/usr", MountId: mount.MountId, Target: mount.GetMountPoint().GetPathHint()}}}
	}
	if artifact != "" {
		s.PreparedArtifactId = str(artifact)
	}
	return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_StateAnchor{StateAnchor: s}}
}

func sbSnap(container string, hc, rs, runsc *v1.ProcessSlotV1) *v1.RoleSnapshotV1 {
	s := &v1.SandboxSnapshotV1{Coordinator: hc, Supervisor: rs, Runsc: runsc}
	if container != "" {
		s.ContainerId = str(container)
	}
	return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Sandbox{Sandbox: s}}
}

func helperSnap(helper, rs *v1.ProcessSlotV1) *v1.RoleSnapshotV1 {
	return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Helper{Helper: &v1.HelperSnapshotV1{Helper: helper, Supervisor: rs}}}
}

var testNetns = &v1.NamespaceIdentity{Dev: 4, Ino: 4026532000}

func netSnap(gen uint64, rs *v1.ProcessSlotV1, evidenceRS pidfs.Identity) *v1.RoleSnapshotV1 {
	return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Network{Network: &v1.NetworkSnapshotV1{
		Netns: testNetns, ReadinessFingerprint: fp("ready"), Supervisor: rs,
		Readiness: &v1.NetworkReadinessEvidenceV1{Generation: gen, ReadinessFingerprint: fp("ready"), Netns: testNetns,
			Supervisor: IdentityProto(evidenceRS), DenyObserved: true, PermitObserved: true, DnsObserved: true},
	}}}
}

func pubSnap(fpr []byte) *v1.RoleSnapshotV1 {
	return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Publication{Publication: &v1.PublicationSnapshotV1{
		ControlSocket: &v1.FileIdentityV1{Dev: 1, Ino: 77, PathHint: "/run/x/control.sock"}, ConfigurationFingerprint: fpr}}}
}

func sessSnap(hc, exec *v1.ProcessSlotV1, full bool) *v1.SessionTerminalSnapshotV1 {
	s := &v1.SessionTerminalSnapshotV1{Coordinator: hc, ExecClient: exec}
	if full {
		s.Pty = &v1.PtyIdentityV1{PtsIndex: 3, Master: &v1.FileIdentityV1{Dev: 5, Ino: 6}}
		s.ContainerId = str("ctr-1")
		s.Guest = &v1.GuestProcessGroupV1{LeaderPid: 12, LeaderStartTimeTicks: 99, Pgid: 12}
	}
	return s
}

func proofFor(fields []string, procs ...pidfs.Identity) participant.AbsenceProof {
	p := participant.AbsenceProof{Kind: participant.AbsenceExact, Fields: fields, Detail: "observed absent through the exact handles"}
	for _, id := range procs {
		p.Processes = append(p.Processes, id.Authority)
	}
	return p
}

var _ = bytes.Equal
