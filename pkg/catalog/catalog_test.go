package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

const helperEnv = "LAZARET_CATALOG_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

var (
	domA = domain.DeriveID("default", "/home/dev/a")
	domB = domain.DeriveID("default", "/home/dev/b")
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newCatalog(t testing.TB, root string) *Catalog {
	t.Helper()
	c, err := New(root, Options{Logger: quiet(), LockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func refused(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("%s: %v, want ErrRefused", what, err)
	}
}

// testSource is a complete source image identity.
var testSource = SourceImage{ImageName: "oci:/images/busybox:latest",
	ManifestDigest: "sha256:" + strings.Repeat("1", 64), ConfigDigest: "sha256:" + strings.Repeat("2", 64),
	LayerDigests: []string{"sha256:" + strings.Repeat("3", 64)}, DiffIDs: []string{"sha256:" + strings.Repeat("4", 64)}}

// prep is a complete prepare intent.
func prep(op, artifact, staging string, dom domain.ID, gen uint64) Preparation {
	return Preparation{OperationID: op, ArtifactID: artifact, StagingName: staging, PreparerVersion: "prepare/2", DomainID: dom, Generation: gen,
		Source: testSource, Lock: FileIdentity{Dev: 1, Ino: 42}, Preparer: ProcessIdentity{BootID: [16]byte{1}, PidfsDev: 2, PidfsIno: 77, PID: 9}}
}

// publish prepares and publishes artifact id.
func publish(t testing.TB, c *Catalog, id string) {
	t.Helper()
	ctx := context.Background()
	must(t, "begin "+id, c.Update(ctx, func(tx *Tx) error {
		return tx.BeginPreparation(prep("op-"+id, id, "stage-"+id, domA, 1))
	}))
	must(t, "publish "+id, c.Update(ctx, func(tx *Tx) error { return tx.PublishArtifact("op-"+id, 10) }))
}

func TestPreparationAndReclaim(t *testing.T) {
	ctx := context.Background()
	c := newCatalog(t, t.TempDir())
	k := LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 1}
	refused(t, "lease of unknown artifact", c.AcquireLease(ctx, k))
	must(t, "begin", c.Update(ctx, func(tx *Tx) error {
		return tx.BeginPreparation(prep("op-1", "pl-1", "s1", domA, 1))
	}))
	refused(t, "lease of preparing artifact", c.AcquireLease(ctx, k))
	refused(t, "duplicate artifact", c.Update(ctx, func(tx *Tx) error {
		return tx.BeginPreparation(prep("op-2", "pl-1", "s2", domA, 1))
	}))
	refused(t, "reclaim preparing", c.BeginReclaim(ctx, "pl-1", "pl-1.trash"))
	must(t, "publish", c.Update(ctx, func(tx *Tx) error { return tx.PublishArtifact("op-1", 10) }))
	refused(t, "publish twice", c.Update(ctx, func(tx *Tx) error { return tx.PublishArtifact("op-1", 10) }))
	must(t, "lease", c.AcquireLease(ctx, k))
	must(t, "lease again (idempotent)", c.AcquireLease(ctx, k))
	k2 := LeaseKey{ArtifactID: "pl-1", DomainID: domB, Generation: 4}
	must(t, "second domain", c.AcquireLease(ctx, k2))
	ls, err := c.Leases(ctx, "pl-1")
	must(t, "leases", err)
	if len(ls) != 2 || ls[0].LeaseKey != k || ls[1].LeaseKey != k2 || ls[0].Acquired.IsZero() {
		t.Fatalf("leases %+v", ls)
	}
	refused(t, "reclaim with leases", c.BeginReclaim(ctx, "pl-1", "pl-1.trash"))
	always := func(LeaseKey) error { return nil }
	for _, l := range []LeaseKey{k, k2} {
		res, err := c.ReleaseLease(ctx, l, ReleaseProof{ReleaseIntent: always, MountAbsent: always})
		must(t, "release", err)
		if res != Removed {
			t.Fatalf("release %v", res)
		}
	}
	res, err := c.ReleaseLease(ctx, k, ReleaseProof{ReleaseIntent: always, MountAbsent: always})
	if err != nil || res != AlreadyAbsent {
		t.Fatalf("release absent: %v %v", res, err)
	}
	must(t, "reclaim", c.BeginReclaim(ctx, "pl-1", "pl-1.trash"))
	refused(t, "lease of reclaiming artifact", c.AcquireLease(ctx, k))
	must(t, "remove", c.Update(ctx, func(tx *Tx) error { return tx.RemoveArtifact("pl-1") }))
	must(t, "gone", c.View(ctx, func(tx *Tx) error {
		if _, err := tx.Artifact("pl-1"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("artifact still there: %v", err)
		}
		if _, err := tx.Operation("op-1"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("operation still there: %v", err)
		}
		return nil
	}))
	// Abandoned preparation.
	must(t, "begin 2", c.Update(ctx, func(tx *Tx) error {
		return tx.BeginPreparation(prep("op-3", "pl-3", "s3", domA, 2))
	}))
	refused(t, "remove preparing", c.Update(ctx, func(tx *Tx) error { return tx.RemoveArtifact("pl-3") }))
	must(t, "abandon", c.Update(ctx, func(tx *Tx) error { _, err := tx.AbandonPreparation("op-3", "stg-s3"); return err }))
	must(t, "abandoned leaves nothing", c.View(ctx, func(tx *Tx) error {
		if _, err := tx.Artifact("pl-3"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("artifact of an abandoned preparation: %v", err)
		}
		if _, err := tx.Operation("op-3"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("abandoned operation: %v", err)
		}
		return nil
	}))
	if err := c.View(ctx, func(tx *Tx) error { return tx.AcquireLease(k) }); err == nil {
		t.Fatal("write in View accepted")
	}
}

func TestReleaseRechecks(t *testing.T) {
	ctx := context.Background()
	c := newCatalog(t, t.TempDir())
	publish(t, c, "pl-1")
	k := LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 3}
	must(t, "lease", c.AcquireLease(ctx, k))
	always := func(LeaseKey) error { return nil }
	no := func(LeaseKey) error { return errors.New("mount still present") }
	for name, p := range map[string]ReleaseProof{
		"no proof":          {},
		"no mount check":    {ReleaseIntent: always},
		"no intent check":   {MountAbsent: always},
		"intent fails":      {ReleaseIntent: no, MountAbsent: always},
		"mount still there": {ReleaseIntent: always, MountAbsent: no},
	} {
		_, err := c.ReleaseLease(ctx, k, p)
		refused(t, name, err)
	}
	// The rechecks see the exact key and run under the lock: a competing
	// operation cannot take the lock while they run.
	var seen LeaseKey
	_, err := c.ReleaseLease(ctx, k, ReleaseProof{ReleaseIntent: func(got LeaseKey) error {
		seen = got
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := c.View(cctx, func(*Tx) error { return nil }); !errors.Is(err, errdefs.ErrUnavailable) {
			return fmt.Errorf("catalog lock not held during the recheck: %v", err)
		}
		return errors.New("refuse on purpose")
	}, MountAbsent: always})
	refused(t, "recheck under lock", err)
	if !strings.Contains(err.Error(), "refuse on purpose") || seen != k {
		t.Fatalf("recheck: %v, saw %v", err, seen)
	}
	ls, _ := c.Leases(ctx, "pl-1")
	if len(ls) != 1 {
		t.Fatalf("refused releases changed the leases: %+v", ls)
	}
}

// TestLeaseOrderingWithDomainStore runs spec §3.5's acquisition steps 1-3
// and release steps 3-5 against a real Domain Store, with the catalog's
// release recheck reading that store.
func TestLeaseOrderingWithDomainStore(t *testing.T) {
	ctx := context.Background()
	storageRoot, domainRoot := t.TempDir(), t.TempDir()
	c := newCatalog(t, storageRoot)
	publish(t, c, "pl-1")

	lock, err := os.OpenFile(filepath.Join(domainRoot, store.LockName), os.O_RDWR|os.O_CREATE, 0o600)
	must(t, "lock", err)
	defer lock.Close()
	must(t, "flock", unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	id := store.DomainIdentity{ID: domA, Profile: "default", CanonicalWorkspace: "/home/dev/a"}
	st, err := store.Open(domainRoot, lock, id, store.Options{Logger: quiet()})
	must(t, "open store", err)
	defer st.Close()
	boot := pidfs.BootID{1, 2, 3}
	hc := pidfs.Identity{Authority: pidfs.Authority{BootID: boot, Dev: 9, Ino: 100}, HostPID: 10}
	must(t, "generation", st.Update(func(tx *store.Tx) error {
		return tx.CreateGeneration(store.NewGeneration{Number: 5, ConfigurationFingerprint: []byte("c"), CoordinatorID: "hc", Coordinator: hc})
	}))
	lease := func(ls v1.LeaseState) *v1.RoleSnapshotV1 {
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_PreparedLower{PreparedLower: &v1.PreparedLowerSnapshotV1{
			PreparedArtifactId: proto.String("pl-1"), LeaseState: &ls}}}
	}
	k := LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 5}
	// Acquisition 1, 2, 3.
	must(t, "1 intent", st.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(5, participant.PreparedLower, participant.Intent, lease(v1.LeaseState_LEASE_STATE_INTENT))
	}))
	must(t, "2 catalog lease", c.AcquireLease(ctx, k))
	must(t, "3 lease held", st.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(5, participant.PreparedLower, participant.LeaseHeld, lease(v1.LeaseState_LEASE_STATE_HELD))
	}))
	mountPresent := true
	proof := ReleaseProof{
		ReleaseIntent: func(k LeaseKey) error {
			return st.View(func(tx *store.Tx) error { return tx.CheckLeaseReleaseIntent(k.Generation, k.ArtifactID) })
		},
		MountAbsent: func(LeaseKey) error {
			if mountPresent {
				return errors.New("exact mount still present")
			}
			return nil
		},
	}
	// Release before the Domain recorded release intent: refused, retained.
	mountPresent = false
	_, err = c.ReleaseLease(ctx, k, proof)
	refused(t, "release while LeaseHeld", err)
	// Release step 3 (no state anchor in this generation).
	must(t, "3 lower release intent", st.Update(func(tx *store.Tx) error { return tx.ReleaseParticipant(5, participant.PreparedLower) }))
	// Another generation's or artifact's key does not match the intent.
	_, err = c.ReleaseLease(ctx, LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 6}, proof)
	refused(t, "release of another generation", err)
	mountPresent = true
	_, err = c.ReleaseLease(ctx, k, proof)
	refused(t, "release with the mount present", err)
	if ls, _ := c.Leases(ctx, "pl-1"); len(ls) != 1 {
		t.Fatalf("lease not retained: %+v", ls)
	}
	// 4 and 5.
	mountPresent = false
	res, err := c.ReleaseLease(ctx, k, proof)
	if err != nil || res != Removed {
		t.Fatalf("4 release: %v %v", res, err)
	}
	must(t, "5 lower clean", st.Update(func(tx *store.Tx) error {
		return tx.CleanParticipant(5, participant.PreparedLower, participant.AbsenceProof{Kind: participant.AbsenceIndependent,
			Fields: []string{"prepared_artifact_id"}, Detail: "catalog lease removed; mount absent"})
	}))
	must(t, "reclaim now possible", c.BeginReclaim(ctx, "pl-1", "pl-1.trash"))
}

func TestNewerSchemaRefusedBeforeAnyOtherRead(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c := newCatalog(t, root)
	publish(t, c, "pl-1")
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	must(t, "raw open", err)
	must(t, "plant", db.Set(keyVersion, mustMarshal(&v1.SchemaVersionV1{Version: SchemaVersion + 1}), pebble.Sync))
	must(t, "close", db.Close())
	var reads []string
	c.opts.readObserver = func(k []byte) { reads = append(reads, string(k)) }
	err = c.View(ctx, func(tx *Tx) error { _, err := tx.Artifacts(); return err })
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("view: %v", err)
	}
	if len(reads) != 1 || reads[0] != "v" {
		t.Fatalf("reads %q", reads)
	}
	refused(t, "update", c.AcquireLease(ctx, LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 1}))
}

func TestRecordsWithoutVersionRefused(t *testing.T) {
	root := t.TempDir()
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	must(t, "raw open", err)
	must(t, "plant", db.Set([]byte("a/x"), []byte("junk"), pebble.Sync))
	must(t, "close", db.Close())
	err = newCatalog(t, root).View(context.Background(), func(*Tx) error { return nil })
	if !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("%v", err)
	}
}

// migrationTests has one case per entry of migrations.
var migrationTests = map[string]func(t *testing.T){
	"v1-to-v2-preparer-records": testMigrateV1toV2,
}

func TestEveryMigrationTested(t *testing.T) {
	want := uint32(1)
	for _, m := range migrations {
		if m.from != want || m.to != m.from+1 {
			t.Errorf("migration %s: %d -> %d breaks the ordered chain", m.name, m.from, m.to)
		}
		want = m.to
		if migrationTests[m.name] == nil {
			t.Errorf("migration %s has no test case", m.name)
		}
	}
	if want != SchemaVersion {
		t.Errorf("migrations end at %d, schema is %d", want, SchemaVersion)
	}
	for _, m := range migrations {
		t.Run(m.name, migrationTests[m.name])
	}
}

func TestVersionWrittenWithFirstWrite(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c := newCatalog(t, root)
	must(t, "empty view", c.View(ctx, func(*Tx) error { return nil }))
	publish(t, c, "pl-1")
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	must(t, "raw open", err)
	defer db.Close()
	v, closer, err := db.Get(keyVersion)
	must(t, "version", err)
	var sv v1.SchemaVersionV1
	must(t, "decode", proto.Unmarshal(v, &sv))
	closer.Close()
	if sv.GetVersion() != SchemaVersion {
		t.Fatalf("version %d", sv.GetVersion())
	}
	if db.FormatMajorVersion() != FormatMajorVersion {
		t.Fatalf("format %d", db.FormatMajorVersion())
	}
}

func TestLockBoundAndNoHandleOutlivesCall(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c, err := New(root, Options{Logger: quiet(), LockTimeout: 100 * time.Millisecond})
	must(t, "new", err)
	publish(t, c, "pl-1")
	// No descriptor of this process refers to the catalog or its lock.
	entries, err := os.ReadDir("/proc/self/fd")
	must(t, "fds", err)
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if strings.HasPrefix(target, root) {
			t.Errorf("descriptor %s still refers to %s", e.Name(), target)
		}
	}
	// Another holder of the lock bounds the wait (timeout and ctx).
	other, err := os.OpenFile(filepath.Join(root, LockName), os.O_RDWR, 0)
	must(t, "open lock", err)
	must(t, "hold", unix.Flock(int(other.Fd()), unix.LOCK_EX))
	start := time.Now()
	err = c.View(ctx, func(*Tx) error { t.Error("ran without the lock"); return nil })
	if !errors.Is(err, errdefs.ErrUnavailable) || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %v after %s", err, time.Since(start))
	}
	c.opts.LockTimeout = time.Hour
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = c.View(cctx, func(*Tx) error { t.Error("ran without the lock"); return nil })
	cancel()
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx: %v", err)
	}
	other.Close()
	must(t, "after release", c.View(ctx, func(*Tx) error { return nil }))
}

// workerOps acquires n leases of pl-1 for domA, each with generation =
// (number of existing leases + 1): a read-modify-write that loses updates
// unless operations are serialized.
func workerOps(c *Catalog, n int) error {
	for i := 0; i < n; i++ {
		err := c.Update(context.Background(), func(tx *Tx) error {
			ls, err := tx.Leases("pl-1")
			if err != nil {
				return err
			}
			return tx.AcquireLease(LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: uint64(len(ls) + 1)})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func checkSerialized(t *testing.T, c *Catalog, total int) {
	ls, err := c.Leases(context.Background(), "pl-1")
	must(t, "leases", err)
	var gens []int
	for _, l := range ls {
		gens = append(gens, int(l.Generation))
	}
	sort.Ints(gens)
	if len(gens) != total {
		t.Fatalf("%d leases after %d serialized operations (lost updates)", len(gens), total)
	}
	for i, g := range gens {
		if g != i+1 {
			t.Fatalf("generations %v", gens)
		}
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	root := t.TempDir()
	c := newCatalog(t, root)
	publish(t, c, "pl-1")
	const workers, ops = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- workerOps(newCatalog(t, root), ops)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "worker", err)
	}
	checkSerialized(t, c, workers*ops)
}

func helperMain() int {
	root := os.Getenv(helperEnv)
	n, _ := strconv.Atoi(os.Getenv(helperEnv + "_OPS"))
	c, err := New(root, Options{Logger: quiet(), LockTimeout: 2 * time.Minute})
	if err == nil {
		err = workerOps(c, n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestConcurrentProcesses(t *testing.T) {
	root := t.TempDir()
	c := newCatalog(t, root)
	publish(t, c, "pl-1")
	// make check (-short) contends with fewer operations; make unit and
	// CI run all of them.
	const procs = 4
	ops := 15
	if testing.Short() && os.Getenv("CI") == "" {
		ops = 5
	}
	var cmds []*exec.Cmd
	for p := 0; p < procs; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+root, helperEnv+"_OPS="+strconv.Itoa(ops))
		cmd.Stderr = os.Stderr
		must(t, "start", cmd.Start())
		cmds = append(cmds, cmd)
	}
	// This process contends too.
	must(t, "parent worker", workerOps(c, ops))
	for _, cmd := range cmds {
		must(t, "helper", cmd.Wait())
	}
	checkSerialized(t, c, (procs+1)*ops)
}

// TestExclusive: fn runs holding storage-catalog.lock (another operation
// waits, bounded) without opening the catalog, and the lock is released
// after it.
func TestExclusive(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c, err := New(root, Options{Logger: quiet(), LockTimeout: 100 * time.Millisecond})
	must(t, "new", err)
	ran := false
	must(t, "exclusive", c.Exclusive(ctx, func() error {
		ran = true
		if err := c.View(ctx, func(*Tx) error { t.Error("ran inside Exclusive"); return nil }); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("operation inside Exclusive: %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, Dir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Exclusive opened the catalog: %v", err)
		}
		return nil
	}))
	if !ran {
		t.Fatal("fn not run")
	}
	want := errors.New("from fn")
	if err := c.Exclusive(ctx, func() error { return want }); err != want {
		t.Fatalf("fn's error: %v", err)
	}
	must(t, "after", c.View(ctx, func(*Tx) error { return nil }))
}

// Pebble's informational messages are at debug level (errors stay errors).
func TestPebbleInfoIsDebug(t *testing.T) {
	var buf bytes.Buffer
	l := fatalLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Infof("Found %d WALs", 1)
	l.Errorf("disk %s", "trouble")
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="Found 1 WALs"`) || !strings.Contains(out, `level=ERROR msg="disk trouble"`) {
		t.Errorf("log %q", out)
	}
}

// dirState is every entry of dir (recursively) with its size and mtime.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out[p] = fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// walOnlyWrite rewrites the catalog's version record as it is, through
// pebble directly and without a flush: the catalog's last write is then
// only in its WAL (as after a crash before Update's flush).
func walOnlyWrite(t *testing.T, root string) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get(keyVersion)
	if err != nil {
		t.Fatal(err)
	}
	v = append([]byte(nil), v...)
	closer.Close()
	if err := db.Set(keyVersion, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// openFlushes opens the catalog's pebble read-write, as the next Update
// does, and returns how many flushes of recovered writes the open made
// (pebble flushes a replayed WAL inside Open, with synced writes).
func openFlushes(t *testing.T, root string) int {
	t.Helper()
	n := 0
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()},
		EventListener: &pebble.EventListener{FlushEnd: func(i pebble.FlushInfo) {
			if i.InputBytes > 0 && len(i.Output) > 0 {
				n++
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUpdateLeavesNoWALToReplay: an Update's writes are flushed before it
// returns, so that the next operation that may write (a Domain start's
// lease, on its critical path) opens the catalog without replaying and
// flushing a WAL; a WAL left by a crash is replayed and flushed as ever.
func TestUpdateLeavesNoWALToReplay(t *testing.T) {
	root := t.TempDir()
	c := newCatalog(t, root)
	publish(t, c, "art1")
	if n := openFlushes(t, root); n != 0 {
		t.Fatalf("opening after an Update flushed %d replayed WALs, want none", n)
	}
	walOnlyWrite(t, root)
	if n := openFlushes(t, root); n != 1 {
		t.Fatalf("opening after a write only in the WAL flushed %d replayed WALs, want 1", n)
	}
	must(t, "view after the replay", c.View(context.Background(), func(tx *Tx) error {
		a, err := tx.Artifact("art1")
		if err == nil && a.GetState() != Published {
			err = fmt.Errorf("art1 is %v, want Published", a.GetState())
		}
		return err
	}))
}

// TestViewWritesNothing: a View opens pebble read-only: the catalog
// directory's entries, sizes and mtimes (the directory's own included) are
// unchanged after it, including when a write is still only in the WAL; on
// a Storage Root whose catalog was never written it creates nothing and
// reads an empty catalog.
func TestViewWritesNothing(t *testing.T) {
	root := t.TempDir()
	c := newCatalog(t, root)
	var found bool
	must(t, "view of a fresh root", c.View(context.Background(), func(tx *Tx) error {
		arts, err := tx.Artifacts()
		found = len(arts) > 0
		return err
	}))
	if found {
		t.Fatal("a never-written catalog lists artifacts")
	}
	if _, err := os.Stat(filepath.Join(root, Dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("View created the catalog directory: %v", err)
	}

	publish(t, c, "art1")
	walOnlyWrite(t, root)
	before := dirState(t, root)
	time.Sleep(20 * time.Millisecond) // a write would show a later mtime
	for i := 0; i < 3; i++ {
		must(t, "view", c.View(context.Background(), func(tx *Tx) error {
			a, err := tx.Artifact("art1")
			if err == nil && a.GetState() != Published {
				err = fmt.Errorf("art1 is %v, want Published", a.GetState())
			}
			return err
		}))
	}
	after := dirState(t, root)
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("View removed %s", p)
		} else if a != b {
			t.Errorf("View changed %s: %s → %s", p, b, a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("View created %s", p)
		}
	}
	// Mutators still refuse inside a View.
	if err := c.View(context.Background(), func(tx *Tx) error { return tx.BeginPreparation(prep("op2", "art2", "stage2", domA, 1)) }); err == nil {
		t.Fatal("a write inside a View succeeded")
	}
}
