package preparedlower

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
	"github.com/lazaret/lazaret/pkg/store"
)

var discard = slog.New(slog.DiscardHandler)

// tracePath is the model trace this test binary records into: the role's
// PreparedLower steps are asserted from it.
var tracePath string

func TestMain(m *testing.M) {
	proc.MaybeRunWrapper() // the broker's fallback barrier re-executes the test binary
	dir, err := os.MkdirTemp("", "lower-trace")
	if err != nil {
		panic(err)
	}
	tracePath = filepath.Join(dir, "trace.jsonl")
	if err := modeltrace.Start("hc", func(string) string { return tracePath }); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture is one Domain: a real Domain Store and Storage Catalog in a
// temporary directory, a published prepared artifact, a real process
// standing in for RS (its identity is what the sandbox record commits),
// and this process's mount namespace, which is held (a namespace whose
// mounts are never proven absent).
type fixture struct {
	t        *testing.T
	dir      string   // the Domain Root (the store's)
	lock     *os.File // its lifecycle lock
	dom      domain.ID
	storage  string
	st       *store.Store
	cat      *catalog.Catalog
	self, rs pidfs.Identity
	image    string
	paths    []string
	art, md  string
	held     *lv1.NamespaceIdentity // this process's mount namespace
	ownID    uint64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cfg, err := config.Parse("", nil, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := cfg.Profile("default")
	if len(prof.PersistentPaths) < 2 {
		t.Fatalf("the default profile has %d persistent paths, the test needs two", len(prof.PersistentPaths))
	}
	dir := t.TempDir()
	ws := "/w/" + t.Name() // a Domain per test: the trace file is shared
	f := &fixture{t: t, dom: domain.DeriveID("default", ws), storage: filepath.Join(dir, "storage"), image: "docker.io/library/busybox:1", paths: prof.PersistentPaths}
	if err := os.Mkdir(f.storage, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	f.dir, f.lock = dir, lock
	if f.st, err = store.Open(dir, lock, store.DomainIdentity{ID: f.dom, Profile: "default", CanonicalWorkspace: ws}, store.Options{Logger: discard}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f.self = self.Identity()
	self.Close()
	broker := proctest.SelfBroker(t)
	rs, err := broker.Start("rs", proc.Command{Path: "/bin/sleep", Args: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Signal(unix.SIGKILL); rs.Wait(context.Background()) })
	f.rs = rs.Identity()
	dev, ino, id, err := pidfs.MountNamespaceOfPath("/proc/self/ns/mnt")
	if err != nil || id == 0 {
		t.Fatalf("own mount namespace %d:%d ID %d: %v", dev, ino, id, err)
	}
	f.held, f.ownID = &lv1.NamespaceIdentity{Dev: dev, Ino: ino, MntnsId: &id}, id
	if f.cat, err = catalog.New(f.storage, catalog.Options{Logger: discard}); err != nil {
		t.Fatal(err)
	}
	f.md = "sha256:" + strings.Repeat("ab", 32)
	f.art = prepared.ArtifactID(f.md)
	plantArtifact(t, f.storage, f.art, f.md)
	recordPrepared(t, f.cat, f.art, f.md)
	return f
}

// gone is a mount namespace no process holds (no namespace has inode 1).
func (f *fixture) gone() *lv1.NamespaceIdentity {
	return &lv1.NamespaceIdentity{Dev: f.held.Dev, Ino: 1}
}

// service is a coordinator's role driver talking to the fake supervisor
// sup (nil: a recovering coordinator with no RS).
func (f *fixture) service(sup *supervisortest.Supervisor) *Service {
	cfg := Config{Log: discard, Store: f.st, Domain: f.dom, StorageRoot: f.storage, Image: f.image, PersistentPaths: f.paths,
		Coordinator: f.self, Supervisor: func() pidfs.Identity { return f.rs }}
	if sup != nil {
		cfg.Send = func(ctx context.Context, m *lv1.CoordinatorMessage) error { return sup.HC.Send(ctx, m) }
	}
	return New(cfg)
}

// begin records generation gen as the coordinator does before spawning
// RS (the sandbox's bare Intent, then RS's staged slot) and binds s to it.
func (f *fixture) begin(s *Service, gen uint64) {
	f.t.Helper()
	if err := f.st.Update(func(tx *store.Tx) error {
		if err := tx.CreateGeneration(store.NewGeneration{Number: gen, ConfigurationFingerprint: []byte("f"), CoordinatorID: "hc", Coordinator: f.self}); err != nil {
			return err
		}
		return tx.PutParticipant(gen, participant.Sandbox, participant.Intent, nil)
	}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.st.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(gen, participant.Sandbox, participant.Intent, &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Sandbox{Sandbox: &lv1.SandboxSnapshotV1{
			Coordinator: store.CommittedSlot(f.self), Supervisor: store.StagedSlot(f.rs), Runsc: unassignedSlot()}}})
	}); err != nil {
		f.t.Fatal(err)
	}
	s.Begin(gen)
}

// deliver reads RS's next message on the coordinator's end and hands it
// to the role, as the coordinator's exchange does.
func deliver(t *testing.T, s *Service, sup *supervisortest.Supervisor, hello *lv1.SupervisorHello) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), supervisortest.DefaultWait)
	defer cancel()
	var m lv1.SupervisorMessage
	if err := sup.HC.Recv(ctx, &m); err != nil {
		t.Fatalf("coordinator end: %v", err)
	}
	return s.SupervisorMessage(ctx, &m, hello)
}

func (f *fixture) ready() *lv1.ArtifactReady {
	return &lv1.ArtifactReady{PreparedArtifactId: f.art, ImageRef: f.image, ManifestDigest: f.md}
}

// mounted is AnchorsMounted for every persistent path in ns.
func (f *fixture) mounted(ns *lv1.NamespaceIdentity) *lv1.AnchorsMounted {
	m := &lv1.AnchorsMounted{PreparedArtifactId: f.art, MountNamespace: ns}
	for i, p := range f.paths {
		m.Anchors = append(m.Anchors, &lv1.AnchorMount{GuestPath: p, MountId: uint64(100 + i), Target: "/b/anchors/x", Upper: "/u"})
	}
	return m
}

func mountIDs(m *lv1.AnchorsMounted) []uint64 {
	var ids []uint64
	for _, a := range m.Anchors {
		ids = append(ids, a.MountId)
	}
	return ids
}

// phases returns gen's prepared_lower and state_anchor phases ("" for a
// record that does not exist).
func (f *fixture) phases(gen uint64) (pl, sa participant.Phase) {
	f.t.Helper()
	if err := f.st.View(func(tx *store.Tx) error {
		if p, err := tx.Participant(gen, participant.PreparedLower); err == nil {
			pl = p.Phase
		}
		if p, err := tx.Participant(gen, participant.StateAnchor); err == nil {
			sa = p.Phase
		}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return pl, sa
}

func (f *fixture) wantPhases(gen uint64, pl, sa participant.Phase) {
	f.t.Helper()
	if gpl, gsa := f.phases(gen); gpl != pl || gsa != sa {
		f.t.Fatalf("generation %d: prepared_lower %q state_anchor %q, want %q %q", gen, gpl, gsa, pl, sa)
	}
}

// leased reports whether the catalog holds gen's lease on the artifact.
func (f *fixture) leased(gen uint64) bool {
	f.t.Helper()
	ls, err := f.cat.Leases(context.Background(), f.art)
	if err != nil {
		f.t.Fatal(err)
	}
	return slices.ContainsFunc(ls, func(k catalog.Lease) bool { return k.Generation == gen && k.DomainID == f.dom })
}

func (f *fixture) live(gen uint64) bool {
	var live bool
	f.st.View(func(tx *store.Tx) error { live = Live(tx, gen); return nil })
	return live
}

// actions are the PreparedLower steps recorded for gen, in order.
func (f *fixture) actions(gen uint64) []string {
	f.t.Helper()
	fh, err := os.Open(tracePath)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	var out []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var r modeltrace.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			f.t.Fatalf("trace line %q: %v", sc.Text(), err)
		}
		if r.Model == modeltrace.PreparedLower && r.Domain == string(f.dom) && r.Generation == gen {
			out = append(out, r.Action)
		}
	}
	return out
}

func (f *fixture) wantActions(gen uint64, want ...string) {
	f.t.Helper()
	if got := f.actions(gen); !slices.Equal(got, want) {
		f.t.Fatalf("generation %d model steps %v, want %v", gen, got, want)
	}
}

// plantArtifact writes a published tree prepared/<id> as pkg/prepare
// validates it (artifact.json and every mount point).
func plantArtifact(t *testing.T, storage, id, md string) {
	t.Helper()
	dir := filepath.Join(storage, "prepared", id)
	if err := os.MkdirAll(filepath.Join(storage, "prepared", ".staging"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, mp := range prepared.MountPoints {
		p := filepath.Join(dir, "rootfs", mp.Path)
		if mp.Dir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rec := fmt.Sprintf(`{"format_version": %d, "id": %q, "source": {"ref": "oci:/img:latest", "manifest_digest": %q, "config_digest": %q},
		"preparer": "test", "created": "2026-11-30T07:00:00Z", "layers": [], "rootfs_bytes": 1, "skipped_device_nodes": 0, "converted_whiteout_devices": 0}`,
		prepared.FormatVersion, id, md, "sha256:"+strings.Repeat("ef", 32))
	if err := os.WriteFile(filepath.Join(dir, "artifact.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordPrepared records id as its preparer would.
func recordPrepared(t *testing.T, cat *catalog.Catalog, id, md string) {
	t.Helper()
	dom := domain.DeriveID("default", "/elsewhere")
	if err := cat.Update(context.Background(), func(tx *catalog.Tx) error {
		if err := tx.BeginPreparation(catalog.Preparation{OperationID: "prep-" + id[:12], ArtifactID: id, PreparerVersion: "test", DomainID: dom, Generation: 1, StagingName: "s",
			Source:   catalog.SourceImage{ImageName: "oci:/img:latest", ManifestDigest: md, ConfigDigest: "sha256:" + strings.Repeat("ef", 32)},
			Lock:     catalog.FileIdentity{Dev: 1, Ino: 2},
			Preparer: catalog.ProcessIdentity{BootID: [16]byte{1}, PidfsDev: 1, PidfsIno: 3, PID: 4}}); err != nil {
			return err
		}
		return tx.PublishArtifact("prep-"+id[:12], 1)
	}); err != nil {
		t.Fatal(err)
	}
}
