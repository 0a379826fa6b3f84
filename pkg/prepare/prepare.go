package prepare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
)

// Options configures Ensure.
type Options struct {
	// StorageRoot is the Lazaret Storage Root (absolute path). Prepared
	// artifacts live in StorageRoot/prepared.
	StorageRoot string
	// ImageRef is an alltransports image reference, e.g.
	// "oci:/path/to/layout:latest" or "docker://docker.io/library/debian:12".
	ImageRef string
	// Logger receives structured logs. May be nil.
	Logger *slog.Logger
	// Progress receives human-readable progress (layers, bytes). May be nil.
	Progress io.Writer
	// DomainID and Generation name the Domain generation preparing, for the
	// prepare intent in the Storage Catalog.
	DomainID   domain.ID
	Generation uint64
	// Step, when set, is called at each step of tla/PreparedLower.tla the
	// preparation takes, with the action and the prepared-artifact ID,
	// before the step's effect is visible to another process (inside the
	// Storage Catalog transaction that records it): BeginPrepare,
	// CreateStageTree, PublishArtifact, RecoverStage (a dead or failed
	// preparer's intent settled), BeginReclaim and ReclaimArtifact (a
	// Published record whose tree is missing; an interrupted reclamation
	// completed). The Runtime Supervisor records them in the model trace.
	Step func(action, artifactID string)
}

// Errors returned (wrapped) by this package; test with errors.Is.
var (
	// ErrBadReference: the image reference cannot be resolved.
	ErrBadReference = errors.New("bad image reference")
)

// Ensure returns the prepared artifact for opts.ImageRef, preparing and
// publishing it first if it does not exist yet. An existing artifact is
// validated (record version, identity, rootfs and mount points) and reused.
func Ensure(ctx context.Context, opts Options) (prepared.Artifact, error) {
	a, err := ensure(ctx, opts, hooks{})
	if errors.Is(err, prepared.ErrCorrupt) {
		// A damaged tree blocks every start of its image until it goes.
		err = fmt.Errorf("%w; `lazaret gc` reclaims a damaged prepared image that no running Domain uses, and the next start prepares it again", err)
	}
	return a, err
}

// hooks lets tests interpose at fixed points of a preparation.
type hooks struct {
	beforePublish func()
	// at is called at every recorded step (see Steps), e.g. to crash there.
	at func(step string)
}

// PrepareSteps are the preparer's crash points, in order (failpoint
// "prepare:<step>" in failpoint builds).
var PrepareSteps = []string{"locked", "intent", "staged", "renamed", "published"}

func (h hooks) hit(step string) {
	failpoint.Hit("prepare:" + step)
	if h.at != nil {
		h.at(step)
	}
}

func ensure(ctx context.Context, opts Options, h hooks) (prepared.Artifact, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := checkOptions(opts.StorageRoot, opts.ImageRef); err != nil {
		return prepared.Artifact{}, err
	}
	if !opts.DomainID.Valid() || opts.Generation == 0 {
		return prepared.Artifact{}, fmt.Errorf("prepare %s: the Domain ID and generation preparing it are required (got %q, %d)", opts.ImageRef, opts.DomainID, opts.Generation)
	}
	log := opts.Logger.With("storage_root", opts.StorageRoot, "image_ref", opts.ImageRef)
	fail := func(err error) (prepared.Artifact, error) {
		return prepared.Artifact{}, fmt.Errorf("prepare %s: %w", opts.ImageRef, err)
	}

	st, err := prepared.OpenStore(opts.StorageRoot, true)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	st.SetStep(opts.Step)
	cat, err := catalog.New(opts.StorageRoot, catalog.Options{Logger: opts.Logger})
	if err != nil {
		return fail(err)
	}

	img, err := resolve(ctx, opts.ImageRef)
	if err != nil {
		return prepared.Artifact{}, err
	}
	defer img.close()
	id := prepared.ArtifactID(img.source.ManifestDigest)
	log = log.With("artifact_id", id, "manifest_digest", img.source.ManifestDigest)

	// Fast path: a Published record and its valid tree.
	if rec, reusable, err := preparedcatalog.Reusable(ctx, st, cat, id, img.source.ManifestDigest); err != nil {
		return fail(err)
	} else if reusable {
		log.Info("reusing prepared lower")
		fmt.Fprintf(opts.Progress, "prepare: reusing %s for %s\n", id, opts.ImageRef)
		return prepared.ArtifactFor(opts.StorageRoot, rec), nil
	}
	// Not reused: what a preparation records and applies (read here, before
	// the lock and outside the catalog's transactions; a reuse needs only
	// the manifest's digest, which pins the config).
	if err := img.readConfig(ctx); err != nil {
		return prepared.Artifact{}, err
	}
	// Concurrent Domains preparing the same image do it once: the first
	// takes the artifact's preparation lock, the others wait for it and then
	// find the artifact Published.
	lock, err := st.LockPreparation(ctx, id)
	if err != nil {
		return fail(err)
	}
	defer lock.Release()
	h.hit("locked")

	// Under the lock: settle what a dead preparer or gc left, then reuse,
	// adopt, or write the prepare intent.
	opID, err := randomName("prep-")
	if err != nil {
		return fail(err)
	}
	stagingName, err := randomName("")
	if err != nil {
		return fail(err)
	}
	var reuse *prepared.Record
	var prepareNow bool
	for attempt := 0; ; attempt++ {
		var busy bool
		err := cat.Update(ctx, func(tx *catalog.Tx) error {
			ops, err := tx.RunningOperations()
			if err != nil {
				return err
			}
			for _, op := range ops {
				if op.GetArtifactId() != id {
					continue
				}
				if op.GetLockIno() != lock.ID.Ino || op.GetLockDev() != lock.ID.Dev {
					return fmt.Errorf("prepare intent %s names lock inode %d:%d, the preparation lock is %d:%d: cannot prove its preparer gone; move prepared/.locks/%s aside only if no Lazaret runs",
						op.GetOperationId(), op.GetLockDev(), op.GetLockIno(), lock.ID.Dev, lock.ID.Ino, id)
				}
				what, err := preparedcatalog.SettleIntent(st, tx, op, h.hit)
				if err != nil {
					return err
				}
				log.Warn("settled the prepare intent of a preparer that died", "operation_id", op.GetOperationId(), "outcome", what)
			}
			out, err := tx.RecoverReclaim(id, preparedcatalog.ProbeTreeAt(st))
			if err != nil {
				return err
			}
			if out == catalog.InFlight {
				busy = true
				return nil
			}
			if out != catalog.NotReclaiming {
				log.Warn("recovered an interrupted reclamation", "outcome", out.String())
			}
			preparedcatalog.RecordReclaim(st, out, id)
			rec, found, err := st.Lookup(id, img.source.ManifestDigest)
			if err != nil {
				return err
			}
			art, err := tx.Artifact(id)
			switch {
			case err == nil && art.GetState() == catalog.Published && found:
				reuse = rec
				return nil
			case err == nil && art.GetState() == catalog.Published:
				// The tree went missing (removed by hand, or by a gc that
				// did not consult the catalog): with no lease the record
				// goes and the artifact is prepared again.
				if err := tx.BeginReclaim(id, id+".missing"); err != nil {
					return fmt.Errorf("the Storage Catalog records %s Published but prepared/%s is missing: %w", id, id, err)
				}
				if err := tx.RemoveArtifact(id); err != nil {
					return err
				}
				st.RecordStep("BeginReclaim", id)
				st.RecordStep("ReclaimArtifact", id)
				log.Warn("removed the record of an artifact whose tree is missing; preparing it again")
			case err == nil:
				return fmt.Errorf("the Storage Catalog records %s as %v but prepared/%s %s: run `lazaret gc` and retry", id, art.GetState(), id,
					map[bool]string{true: "exists", false: "is missing"}[found])
			case !errors.Is(err, catalog.ErrNotFound):
				return err
			case found:
				// A tree published before the catalog recorded preparations.
				reuse = rec
				return tx.AdoptArtifact(catalog.Adoption{ArtifactID: id, OperationID: opID, PreparerVersion: rec.Preparer,
					Source: preparedcatalog.SourceOfRecord(rec), RootfsBytes: rec.RootfsBytes})
			}
			if err := checkIdentityMap(); err != nil {
				return err
			}
			self, err := selfIdentity()
			if err != nil {
				return err
			}
			prepareNow = true
			if err := tx.BeginPreparation(catalog.Preparation{OperationID: opID, ArtifactID: id, PreparerVersion: preparerVersion(),
				DomainID: opts.DomainID, Generation: opts.Generation, StagingName: stagingName, Source: img.sourceImage(),
				Lock: preparedcatalog.LockIdentity(lock), Preparer: self}); err != nil {
				return err
			}
			st.RecordStep("BeginPrepare", id)
			return nil
		})
		if err != nil {
			return fail(err)
		}
		if !busy {
			break
		}
		if attempt > 100 {
			return fail(fmt.Errorf("a running lazaret gc keeps reclaiming %s", id))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if reuse != nil {
		log.Info("reusing prepared lower published by a concurrent or earlier preparation")
		fmt.Fprintf(opts.Progress, "prepare: reusing %s for %s (prepared concurrently)\n", id, opts.ImageRef)
		return prepared.ArtifactFor(opts.StorageRoot, reuse), nil
	}
	if !prepareNow {
		return fail(fmt.Errorf("internal: no decision for %s", id))
	}
	h.hit("intent")
	log = log.With("operation_id", opID)

	start := time.Now()
	log.Info("preparing lower", "layers", len(img.layers))
	fmt.Fprintf(opts.Progress, "preparing image %s (first use; later starts reuse it): %d layers, %s -> %s\n", opts.ImageRef, len(img.layers), prepared.HumanBytes(img.totalBytes()), id)
	stg, err := st.NewStaging(stagingName)
	if err != nil {
		return fail(errors.Join(err, preparedcatalog.Abandon(ctx, st, cat, opID, lock, h.hit, log)))
	}
	st.RecordStep("CreateStageTree", id)
	published := false
	defer func() {
		if !published {
			stg.CloseFDs()
			if err := preparedcatalog.Abandon(ctx, st, cat, opID, lock, h.hit, log); err != nil {
				log.Warn("abandoning the preparation failed; gc settles its intent", "staging", stg.Name(), "err", err)
			}
		}
	}()

	counts, err := applyLayers(ctx, img, stg, log, opts.Progress)
	if err != nil {
		return fail(err)
	}
	created, replaced, err := prepared.EnsureMountPoints(stg.RootfsFD())
	if err != nil {
		return fail(fmt.Errorf("mount points: %w", err))
	}
	for _, p := range replaced {
		log.Warn("replaced image entry with a mount point", "path", p)
	}
	rec := &prepared.Record{
		FormatVersion:            prepared.FormatVersion,
		ID:                       id,
		Source:                   img.source,
		Preparer:                 preparerVersion(),
		Created:                  time.Now().UTC().Truncate(time.Millisecond),
		Layers:                   img.layerRecords(),
		RootfsBytes:              counts.bytes,
		SkippedDeviceNodes:       counts.skippedDevices,
		SkippedDevicePaths:       counts.skippedPaths,
		ConvertedWhiteoutDevices: counts.whiteoutDevices,
		CreatedMountPoints:       created,
		ReplacedMountPoints:      replaced,
	}
	if err := stg.WriteRecord(rec); err != nil {
		return fail(err)
	}
	h.hit("staged")
	if failpoint.Armed("prepare:pause-staged") { // integration tests: a live preparation gc must keep
		time.Sleep(15 * time.Second)
	}
	if h.beforePublish != nil {
		h.beforePublish()
	}
	won, err := st.Publish(stg, id)
	if err != nil {
		return fail(fmt.Errorf("publish %s: %w", id, err))
	}
	if !won {
		// Only a preparer that ignores the lock could have published it.
		return fail(fmt.Errorf("prepared/%s appeared while this preparation held its lock (a foreign writer?): not touching it", id))
	}
	published = true
	h.hit("renamed")
	if err := cat.Update(ctx, func(tx *catalog.Tx) error {
		if err := tx.PublishArtifact(opID, counts.bytes); err != nil {
			return err
		}
		st.RecordStep("PublishArtifact", id)
		return nil
	}); err != nil {
		// The tree is in place; the next preparer (or gc) rolls the intent
		// forward once this process's lock is released.
		return fail(fmt.Errorf("record publication of %s: %w", id, err))
	}
	h.hit("published")
	log.Info("published prepared lower", "duration", time.Since(start), "rootfs_bytes", counts.bytes,
		"skipped_device_nodes", counts.skippedDevices, "created_mount_points", len(created))
	fmt.Fprintf(opts.Progress, "prepare: published %s in %s (%s, %d device nodes skipped)\n",
		id, time.Since(start).Round(time.Millisecond), prepared.HumanBytes(counts.bytes), counts.skippedDevices)
	return prepared.ArtifactFor(opts.StorageRoot, rec), nil
}

// Lookup finds the published artifact for imageRef without preparing it.
// It resolves the reference to its manifest digest (reading the manifest
// only, no layers; a registry reference needs the network) and validates
// the artifact it maps to. found is false when no artifact is published.
func Lookup(storageRoot, imageRef string) (prepared.Artifact, bool, error) {
	if err := checkOptions(storageRoot, imageRef); err != nil {
		return prepared.Artifact{}, false, err
	}
	img, err := resolve(context.Background(), imageRef)
	if err != nil {
		return prepared.Artifact{}, false, err
	}
	defer img.close()
	a, found, err := prepared.LookupDigest(storageRoot, prepared.ArtifactID(img.source.ManifestDigest), img.source.ManifestDigest)
	if err != nil {
		err = fmt.Errorf("prepare %s: %w", imageRef, err)
	}
	return a, found, err
}

func checkOptions(storageRoot, imageRef string) error {
	if strings.TrimSpace(imageRef) == "" {
		return fmt.Errorf("prepare: no image reference given (%w)", ErrBadReference)
	}
	if !filepath.IsAbs(storageRoot) {
		return fmt.Errorf("prepare %s: storage root %q is not an absolute path", imageRef, storageRoot)
	}
	return nil
}

func randomName(prefix string) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// selfIdentity is this process's pidfs identity for the prepare intent.
func selfIdentity() (catalog.ProcessIdentity, error) {
	h, err := pidfs.Open(os.Getpid())
	if err != nil {
		return catalog.ProcessIdentity{}, fmt.Errorf("preparer identity: %w", err)
	}
	defer h.Close()
	id := h.Identity()
	return catalog.ProcessIdentity{BootID: id.BootID, PidfsDev: id.Dev, PidfsIno: id.Ino, PID: uint32(os.Getpid())}, nil
}

// sourceImage is the catalog's view of a resolved image.
func (img *resolvedImage) sourceImage() catalog.SourceImage {
	s := catalog.SourceImage{ImageName: img.source.Ref, ManifestDigest: img.source.ManifestDigest, ConfigDigest: img.source.ConfigDigest}
	for i, l := range img.layers {
		s.LayerDigests = append(s.LayerDigests, l.Digest.String())
		s.DiffIDs = append(s.DiffIDs, img.diffIDs[i].String())
	}
	return s
}

// preparerVersion names this preparer and the library versions linked in.
func preparerVersion() string {
	parts := []string{fmt.Sprintf("lazaret-prepare/%d", prepared.FormatVersion)}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.podman.io/image/v5" || d.Path == "go.podman.io/storage" {
				parts = append(parts, d.Path+"@"+d.Version)
			}
		}
	}
	return strings.Join(parts, " ")
}
