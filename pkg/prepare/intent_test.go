package prepare

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
)

var testDomain = domain.DeriveID("default", "/home/dev/prepare-test")

func testCatalog(t *testing.T, root string) *catalog.Catalog {
	t.Helper()
	c, err := catalog.New(root, catalog.Options{LockTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// catalogState lists every operation and artifact record.
func catalogState(t *testing.T, root string) (ops []*v1.PreparationOperationRecordV1, arts []*v1.PreparedArtifactRecordV1) {
	t.Helper()
	if err := testCatalog(t, root).View(context.Background(), func(tx *catalog.Tx) error {
		var err error
		if ops, err = tx.Operations(); err != nil {
			return err
		}
		arts, err = tx.Artifacts()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ops, arts
}

func resolvedDigest(t *testing.T, ref string) string {
	t.Helper()
	img, err := resolve(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer img.close()
	return img.source.ManifestDigest
}

// dropRecord deletes an artifact's record (as if it was prepared before
// the catalog recorded preparations).
func dropRecord(t *testing.T, cat *catalog.Catalog, id string) {
	t.Helper()
	if err := cat.Update(context.Background(), func(tx *catalog.Tx) error {
		if err := tx.BeginReclaim(id, id+".x"); err != nil {
			return err
		}
		return tx.RemoveArtifact(id)
	}); err != nil {
		t.Fatal(err)
	}
}

func digestOf(c string) string { return "sha256:" + strings.Repeat(c, 64) }

// plantIntent records a Running prepare intent for artifact id with staging
// tree name (created when mkTree), whose preparation lock file is created;
// it returns the lock file's path.
func plantIntent(t *testing.T, root, op, id, name string, mkTree bool) string {
	t.Helper()
	prepared := filepath.Join(root, preparedDir)
	for _, d := range []string{stagingDir, locksDir} {
		if err := os.MkdirAll(filepath.Join(prepared, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	lockPath := filepath.Join(prepared, locksDir, id)
	if err := os.WriteFile(lockPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var sb unix.Stat_t
	if err := unix.Stat(lockPath, &sb); err != nil {
		t.Fatal(err)
	}
	if mkTree {
		if err := os.MkdirAll(filepath.Join(prepared, stagingDir, name, "rootfs", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(prepared, stagingDir, name, "rootfs", "bin", "sh"), []byte("x"), 0o755)
	}
	self, err := selfIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if err := testCatalog(t, root).Update(context.Background(), func(tx *catalog.Tx) error {
		return tx.BeginPreparation(catalog.Preparation{OperationID: op, ArtifactID: id, PreparerVersion: "test", DomainID: testDomain, Generation: 1,
			StagingName: name, Source: catalog.SourceImage{ImageName: "oci:/x:latest", ManifestDigest: digestOf("1"), ConfigDigest: digestOf("2")},
			Lock: catalog.FileIdentity{Dev: uint64(sb.Dev), Ino: sb.Ino}, Preparer: self})
	}); err != nil {
		t.Fatal(err)
	}
	return lockPath
}

func entryFor(res preparedcatalog.GCResult, name string) preparedcatalog.GCEntry {
	for _, e := range res.Entries {
		if e.Name == name {
			return e
		}
	}
	return preparedcatalog.GCEntry{}
}

// TestGCDecisionsOnStagingTrees (OR-7): gc reclaims an abandoned staging
// tree only through its prepare intent, once the intent's exact lock inode
// is free; a tree with no intent, a tree whose preparer holds its lock, a
// tree whose intent names another lock inode, and a foreign tree are never
// touched; the quarantined tree is deleted by PurgeTrash.
func TestGCDecisionsOnStagingTrees(t *testing.T) {
	root := t.TempDir()
	const (
		idDead  = "pl-00000000000000000000000000000001"
		idLive  = "pl-00000000000000000000000000000002"
		idMoved = "pl-00000000000000000000000000000003"
	)
	plantIntent(t, root, "prep-dead", idDead, "dead", true)
	livePath := plantIntent(t, root, "prep-live", idLive, "live", true)
	movedPath := plantIntent(t, root, "prep-moved", idMoved, "moved", true)
	plantIntent(t, root, "prep-notree", "pl-00000000000000000000000000000004", "notree", false)
	if err := os.MkdirAll(filepath.Join(root, preparedDir, stagingDir, "nointent", "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, preparedDir, "foreign"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A live preparer holds its lock (another open file description is as
	// good as another process for flock).
	live, err := os.OpenFile(livePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := unix.Flock(int(live.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// The lock file of "moved" was replaced: the intent's inode is gone.
	if err := os.WriteFile(movedPath+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(movedPath+".new", movedPath); err != nil {
		t.Fatal(err)
	}

	for _, dry := range []bool{true, false} {
		res, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{}, dry, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{".staging/dead": "reclaimed", ".staging/live": "keep", ".staging/moved": "keep", ".staging/nointent": "keep",
			".staging/notree": "reclaimed", "foreign": "keep"}
		if dry {
			want[".staging/dead"], want[".staging/notree"] = "reclaim", "reclaim"
		}
		for name, action := range want {
			if e := entryFor(res, name); e.Action != action {
				t.Errorf("dry=%v %s: %+v, want %s", dry, name, e, action)
			}
		}
		if e := entryFor(res, ".staging/live"); !strings.Contains(e.Reason, "in progress") {
			t.Errorf("live reason: %q", e.Reason)
		}
		if e := entryFor(res, ".staging/moved"); !strings.Contains(e.Reason, "cannot prove the preparer gone") {
			t.Errorf("moved-lock reason: %q", e.Reason)
		}
		if e := entryFor(res, ".staging/nointent"); !strings.Contains(e.Reason, "no prepare intent") {
			t.Errorf("no-intent reason: %q", e.Reason)
		}
		if dry {
			if n := stagingEntries(t, root); len(n) != 4 {
				t.Fatalf("dry run changed staging: %v", n)
			}
		}
	}
	if n := stagingEntries(t, root); strings.Join(n, ",") != "live,moved,nointent" {
		t.Errorf("staging after gc: %v", n)
	}
	ops, arts := catalogState(t, root)
	if len(ops) != 2 || len(arts) != 2 {
		t.Errorf("catalog after gc: ops %v arts %v (want the live and moved intents only)", ops, arts)
	}
	trash, _ := os.ReadDir(filepath.Join(root, preparedDir, trashDir))
	if len(trash) != 1 || trash[0].Name() != "stg-dead" {
		t.Fatalf("trash: %v", trash)
	}
	if n, err := prepared.PurgeTrash(context.Background(), root); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, preparedDir, "foreign")); err != nil {
		t.Fatalf("foreign tree touched: %v", err)
	}
	// Once the live preparer is gone, its tree is reclaimed too.
	live.Close()
	res, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{}, false, time.Now())
	if err != nil || entryFor(res, ".staging/live").Action != "reclaimed" {
		t.Fatalf("after the preparer ended: %+v %v", res, err)
	}
}

// TestAdoptUnrecordedTree: a published tree without a catalog record (one
// prepared before schema 2) is adopted by the next preparer from its
// artifact.json instead of being prepared again.
func TestAdoptUnrecordedTree(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	ctx := context.Background()
	a, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: busyboxRef(t), DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	dropRecord(t, testCatalog(t, root), a.ID)
	var progress strings.Builder
	b, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: busyboxRef(t), DomainID: testDomain, Generation: 2, Progress: &progress})
	if err != nil || b.ID != a.ID || !strings.Contains(progress.String(), "reusing") {
		t.Fatalf("adoption: %+v %v %q", b, err, progress.String())
	}
	_, arts := catalogState(t, root)
	if len(arts) != 1 || arts[0].GetOrigin() != catalog.OriginAdopted || arts[0].GetState() != catalog.Published ||
		arts[0].GetManifestDigest() != a.Source.ManifestDigest || len(arts[0].GetLayerDigests()) == 0 {
		t.Fatalf("adopted record: %v", arts)
	}
}

// --- crash tests ----------------------------------------------------------

const crashEnv = "LAZARET_PREPARE_CRASH" // "prepare|gc:<step>:<root>:<ref>"

// crashChild runs in the re-executed test binary: it prepares (or gcs)
// and SIGKILLs itself at the named step.
func crashChild(spec string) int {
	kind, rest, _ := strings.Cut(spec, ":")
	step, rest, _ := strings.Cut(rest, ":")
	root, ref, _ := strings.Cut(rest, ":")
	h := hooks{at: func(s string) {
		if s == step {
			unix.Kill(os.Getpid(), unix.SIGKILL)
			select {}
		}
	}}
	var err error
	switch kind {
	case "prepare":
		_, err = ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}, h)
	case "gc":
		_, err = preparedcatalog.GC(root, preparedcatalog.GCPolicy{At: h.at}, false, time.Now())
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	return 3 // the step was never reached
}

func runCrash(t *testing.T, kind, step, root, ref string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+kind+":"+step+":"+root+":"+ref)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(interface{ Signaled() bool }).Signaled() == false {
		t.Fatalf("%s crash at %s: not killed there (%v): %s", kind, step, err, out)
	}
}

// checkSettled asserts the catalog holds no Running intent and no
// Reclaiming record, and every Published record has its tree.
func checkSettled(t *testing.T, root string) {
	t.Helper()
	ops, arts := catalogState(t, root)
	for _, op := range ops {
		if op.GetState().String() == "PREPARATION_OPERATION_STATE_RUNNING" {
			t.Errorf("running intent left: %v", op)
		}
	}
	for _, a := range arts {
		if a.GetState() != catalog.Published {
			t.Errorf("artifact left %v: %v", a.GetState(), a)
		} else if _, err := os.Stat(filepath.Join(root, preparedDir, a.GetArtifactId(), recordName)); err != nil {
			t.Errorf("Published %s without its tree: %v", a.GetArtifactId(), err)
		}
	}
}

// TestCrashAtEachPrepareStep: a preparer SIGKILLed at each step leaves
// state the next preparer, or gc, settles deterministically through the
// prepare intent: afterwards exactly one Published artifact, no Running
// intent, no staging tree, nothing in the trash after PurgeTrash.
func TestCrashAtEachPrepareStep(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	requireRoot(t)
	ref := busyboxRef(t)
	for _, step := range PrepareSteps {
		for _, by := range []string{"prepare", "gc"} {
			t.Run(step+"/settled-by-"+by, func(t *testing.T) {
				root := t.TempDir()
				runCrash(t, "prepare", step, root, ref)
				ops, _ := catalogState(t, root)
				if step == "locked" && len(ops) != 0 || step != "locked" && len(ops) != 1 {
					t.Fatalf("intents after a crash at %s: %v", step, ops)
				}
				// The PreparedLower steps the settlement and the next
				// preparation take (Options.Step, GCPolicy.Step).
				var steps []string
				record := func(action, id string) { steps = append(steps, action) }
				if by == "gc" {
					res, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{Keep: 5, Step: record}, false, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("gc: recovered %v", res.Recovered)
					checkSettled(t, root)
				}
				var progress strings.Builder
				a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 2, Progress: &progress, Step: record})
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{
					"locked":    "BeginPrepare CreateStageTree PublishArtifact",
					"intent":    "RecoverStage BeginPrepare CreateStageTree PublishArtifact",
					"staged":    "RecoverStage BeginPrepare CreateStageTree PublishArtifact",
					"renamed":   "PublishArtifact", // the dead preparer's rename rolled forward
					"published": "",
				}[step]
				if got := strings.Join(steps, " "); got != want {
					t.Errorf("PreparedLower steps after a crash at %s settled by %s: %q, want %q", step, by, got, want)
				}
				reused := strings.Contains(progress.String(), "reusing")
				if wantReuse := step == "renamed" || step == "published"; reused != wantReuse {
					t.Errorf("after a crash at %s: reused=%v, want %v (%q)", step, reused, wantReuse, progress.String())
				}
				checkSettled(t, root)
				if _, arts := catalogState(t, root); len(arts) != 1 || arts[0].GetArtifactId() != a.ID {
					t.Errorf("artifacts: %v", arts)
				}
				if n := stagingEntries(t, root); len(n) != 0 {
					t.Errorf("staging left: %v", n)
				}
				prepared.PurgeTrash(context.Background(), root)
				if ents, _ := os.ReadDir(filepath.Join(root, preparedDir, trashDir)); len(ents) != 0 {
					t.Errorf("trash left: %v", ents)
				}
			})
		}
	}
}

// TestCrashAtEachGCStep: a gc SIGKILLed at each step (while reclaiming an
// unleased artifact and an abandoned staging tree) leaves state that the
// next lease acquisition (RecoverReclaim under the catalog lock), the next
// preparer, or the next gc completes or rolls back deterministically, and
// never blocks a lease.
func TestCrashAtEachGCStep(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	requireRoot(t)
	ref := busyboxRef(t)
	ctx := context.Background()
	for _, step := range preparedcatalog.GCSteps {
		for _, by := range []string{"lease", "prepare", "gc"} {
			t.Run(step+"/settled-by-"+by, func(t *testing.T) {
				root := t.TempDir()
				a, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1})
				if err != nil {
					t.Fatal(err)
				}
				plantIntent(t, root, "prep-dead", "pl-00000000000000000000000000000009", "dead", true)
				runCrash(t, "gc", step, root, ref)
				cat := testCatalog(t, root)
				switch by {
				case "lease":
					// The Host Coordinator's acquisition while RS holds the
					// tree (no preparer ran since the crash); a tree that
					// left prepared/ is completed and prepared again.
					lease := func(id string) error {
						return cat.Update(ctx, func(tx *catalog.Tx) error {
							out, err := tx.RecoverReclaim(id, preparedcatalog.ProbeTree(root))
							if err != nil {
								return err
							}
							t.Logf("lease-time recovery of %s: %s", id, out)
							return tx.AcquireLease(catalog.LeaseKey{ArtifactID: id, DomainID: testDomain, Generation: 2})
						})
					}
					use, err := prepared.Hold(root, a.ID)
					if err == nil {
						defer use.Release()
						if err := lease(a.ID); err != nil {
							t.Fatalf("lease after a gc crash at %s: %v", step, err)
						}
						break
					}
					if !errors.Is(err, prepared.ErrGone) {
						t.Fatal(err)
					}
					if err := lease(a.ID); err == nil {
						t.Fatalf("lease of a reclaimed artifact accepted after a gc crash at %s", step)
					}
					b, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 2})
					if err != nil {
						t.Fatal(err)
					}
					if err := lease(b.ID); err != nil {
						t.Fatalf("lease of the re-prepared artifact: %v", err)
					}
				case "prepare":
					if _, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 2}); err != nil {
						t.Fatal(err)
					}
				case "gc":
					res, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{}, false, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("gc: recovered %v", res.Recovered)
				}
				// A final gc settles the abandoned intent in every case.
				if _, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{Keep: 5}, false, time.Now()); err != nil {
					t.Fatal(err)
				}
				checkSettled(t, root)
				_, arts := catalogState(t, root)
				_, statErr := os.Stat(a.Dir)
				if len(arts) == 1 && statErr != nil || len(arts) == 0 && statErr == nil {
					t.Errorf("record %v vs tree %v disagree", arts, statErr)
				}
				if n := stagingEntries(t, root); len(n) != 0 {
					t.Errorf("staging left: %v", n)
				}
			})
		}
	}
}

func init() {
	if spec := os.Getenv(crashEnv); spec != "" {
		crashHook = func() int { return crashChild(spec) }
	}
}

var crashHook func() int
