package prepare

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"golang.org/x/sys/unix"
)

// ControlDir is the fixed Lazaret control directory inside the sandbox.
const ControlDir = "/.lazaret"

// FormatVersion is the version of the preparer's output (tree contents and
// artifact.json schema). It is part of the prepared-artifact ID; records
// with a newer version are refused.
//
// History: 1 initial; 2 adds the default State Anchor directories (/usr,
// /var/lib, /opt, /root, /home) to the guaranteed mount points.
const FormatVersion = 2

// MountPoint is a path every prepared rootfs contains so that the sandbox
// runtime can mount over it without writing to the read-only lower.
type MountPoint struct {
	// Path is absolute inside the rootfs.
	Path string
	// Dir tells a directory from a regular file.
	Dir bool
	// Mode is used when the preparer has to create the path (owner 0:0).
	Mode os.FileMode
}

// MountPoints lists, parents first, the mount points Ensure guarantees.
var MountPoints = []MountPoint{
	{Path: "/proc", Dir: true, Mode: 0o755},
	{Path: "/sys", Dir: true, Mode: 0o755},
	{Path: "/dev", Dir: true, Mode: 0o755},
	{Path: "/dev/pts", Dir: true, Mode: 0o755},
	{Path: "/dev/shm", Dir: true, Mode: 0o755},
	{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
	{Path: "/workspace", Dir: true, Mode: 0o755},
	{Path: ControlDir, Dir: true, Mode: 0o755},
	{Path: "/etc", Dir: true, Mode: 0o755},
	{Path: "/etc/hosts", Mode: 0o644},
	{Path: "/etc/hostname", Mode: 0o644},
	{Path: "/etc/resolv.conf", Mode: 0o644},
	// The default State Anchor paths (config.DefaultPersistentPaths), so
	// that every image can carry them: an overlay's lower must exist.
	{Path: "/usr", Dir: true, Mode: 0o755},
	{Path: "/var", Dir: true, Mode: 0o755},
	{Path: "/var/lib", Dir: true, Mode: 0o755},
	{Path: "/opt", Dir: true, Mode: 0o755},
	{Path: "/root", Dir: true, Mode: 0o700},
	{Path: "/home", Dir: true, Mode: 0o755},
}

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

// SourceIdentity identifies the image an artifact was prepared from.
type SourceIdentity struct {
	// Ref is the transport-qualified reference used at preparation time.
	Ref string `json:"ref"`
	// ManifestDigest is the digest of the single-platform image manifest
	// (the instance chosen from a manifest list, if any).
	ManifestDigest string `json:"manifest_digest"`
	// ConfigDigest is the digest of the image configuration.
	ConfigDigest string `json:"config_digest"`
}

// Artifact is a published prepared lower.
type Artifact struct {
	// ID is the prepared-artifact ID ("pl-" + 32 hex).
	ID string
	// Dir is the artifact directory, StorageRoot/prepared/ID. Paths are
	// lookup hints: open them beneath the Storage Root descriptor.
	Dir string
	// Rootfs is Dir/rootfs, the tree to expose read-only as the lower.
	Rootfs string
	// Source is the image the artifact was prepared from.
	Source SourceIdentity
	// Created is when the artifact was prepared.
	Created time.Time
}

// Errors returned (wrapped) by this package; test with errors.Is.
var (
	// ErrNewerFormat: an artifact record was written by a newer Lazaret.
	ErrNewerFormat = errors.New("prepared artifact has a newer format version")
	// ErrCorrupt: an artifact record or tree is unreadable or inconsistent.
	ErrCorrupt = errors.New("prepared artifact is corrupt")
	// ErrBadReference: the image reference cannot be resolved.
	ErrBadReference = errors.New("bad image reference")
)

const (
	preparedDir  = "prepared"
	stagingDir   = ".staging"
	rootfsName   = "rootfs"
	recordName   = "artifact.json"
	idPrefix     = "pl-"
	staleStaging = time.Minute
)

var idPattern = regexp.MustCompile(`^pl-[0-9a-f]{32}$`)

// ArtifactID returns the prepared-artifact ID of the image with the given
// manifest digest.
func ArtifactID(manifestDigest string) string {
	h := sha256.New()
	fmt.Fprintf(h, "lazaret prepared lower\x00format %d\x00%s", FormatVersion, manifestDigest)
	return idPrefix + hex.EncodeToString(h.Sum(nil))[:32]
}

// ValidID reports whether id has the form of a prepared-artifact ID.
func ValidID(id string) bool { return idPattern.MatchString(id) }

func artifactFor(storageRoot string, rec *artifactRecord) Artifact {
	dir := filepath.Join(storageRoot, preparedDir, rec.ID)
	return Artifact{
		ID:      rec.ID,
		Dir:     dir,
		Rootfs:  filepath.Join(dir, rootfsName),
		Source:  rec.Source,
		Created: rec.Created,
	}
}

// Ensure returns the prepared artifact for opts.ImageRef, preparing and
// publishing it first if it does not exist yet. An existing artifact is
// validated (record version, identity, rootfs and mount points) and reused.
func Ensure(ctx context.Context, opts Options) (Artifact, error) {
	return ensure(ctx, opts, hooks{})
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

func ensure(ctx context.Context, opts Options, h hooks) (Artifact, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := checkOptions(opts.StorageRoot, opts.ImageRef); err != nil {
		return Artifact{}, err
	}
	if !opts.DomainID.Valid() || opts.Generation == 0 {
		return Artifact{}, fmt.Errorf("prepare %s: the Domain ID and generation preparing it are required (got %q, %d)", opts.ImageRef, opts.DomainID, opts.Generation)
	}
	log := opts.Logger.With("storage_root", opts.StorageRoot, "image_ref", opts.ImageRef)
	fail := func(err error) (Artifact, error) { return Artifact{}, fmt.Errorf("prepare %s: %w", opts.ImageRef, err) }

	st, err := openStore(opts.StorageRoot, true)
	if err != nil {
		return fail(err)
	}
	defer st.close()
	st.step = opts.Step
	cat, err := catalog.New(opts.StorageRoot, catalog.Options{Logger: opts.Logger})
	if err != nil {
		return fail(err)
	}

	img, err := resolve(ctx, opts.ImageRef, true)
	if err != nil {
		return Artifact{}, err
	}
	defer img.close()
	id := ArtifactID(img.source.ManifestDigest)
	log = log.With("artifact_id", id, "manifest_digest", img.source.ManifestDigest)

	// Fast path: a Published record and its valid tree.
	if rec, found, err := st.lookup(id, img.source.ManifestDigest); err != nil {
		return fail(err)
	} else if found {
		var published bool
		if err := cat.View(ctx, func(tx *catalog.Tx) error {
			a, err := tx.Artifact(id)
			published = err == nil && a.GetState() == catalog.Published
			if errors.Is(err, catalog.ErrNotFound) {
				err = nil
			}
			return err
		}); err != nil {
			return fail(err)
		}
		if published {
			log.Info("reusing prepared lower")
			fmt.Fprintf(opts.Progress, "prepare: reusing %s for %s\n", id, opts.ImageRef)
			return artifactFor(opts.StorageRoot, rec), nil
		}
	}
	// Concurrent Domains preparing the same image do it once: the first
	// takes the artifact's preparation lock, the others wait for it and then
	// find the artifact Published.
	lock, err := st.lockPreparation(ctx, id)
	if err != nil {
		return fail(err)
	}
	defer lock.release()
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
	var reuse *artifactRecord
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
				if op.GetLockIno() != lock.id.Ino || op.GetLockDev() != lock.id.Dev {
					return fmt.Errorf("prepare intent %s names lock inode %d:%d, the preparation lock is %d:%d: cannot prove its preparer gone; move prepared/.locks/%s aside only if no Lazaret runs",
						op.GetOperationId(), op.GetLockDev(), op.GetLockIno(), lock.id.Dev, lock.id.Ino, id)
				}
				what, err := st.settleIntent(tx, op, h.hit)
				if err != nil {
					return err
				}
				log.Warn("settled the prepare intent of a preparer that died", "operation_id", op.GetOperationId(), "outcome", what)
			}
			out, err := tx.RecoverReclaim(id, st.probeTree)
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
			st.recordReclaim(out, id)
			rec, found, err := st.lookup(id, img.source.ManifestDigest)
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
				st.record("BeginReclaim", id)
				st.record("ReclaimArtifact", id)
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
					Source: sourceOfRecord(rec), RootfsBytes: rec.RootfsBytes})
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
				Lock: lock.id, Preparer: self}); err != nil {
				return err
			}
			st.record("BeginPrepare", id)
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
		return artifactFor(opts.StorageRoot, reuse), nil
	}
	if !prepareNow {
		return fail(fmt.Errorf("internal: no decision for %s", id))
	}
	h.hit("intent")
	log = log.With("operation_id", opID)

	start := time.Now()
	log.Info("preparing lower", "layers", len(img.layers))
	fmt.Fprintf(opts.Progress, "preparing image %s (first use; later starts reuse it): %d layers, %s -> %s\n", opts.ImageRef, len(img.layers), HumanBytes(img.totalBytes()), id)
	stg, err := st.newStaging(stagingName)
	if err != nil {
		return fail(errors.Join(err, st.abandon(ctx, cat, opID, lock, h, log)))
	}
	st.record("CreateStageTree", id)
	published := false
	defer func() {
		if !published {
			stg.closeFDs()
			if err := st.abandon(ctx, cat, opID, lock, h, log); err != nil {
				log.Warn("abandoning the preparation failed; gc settles its intent", "staging", stg.name, "err", err)
			}
		}
	}()

	counts, err := applyLayers(ctx, img, stg, log, opts.Progress)
	if err != nil {
		return fail(err)
	}
	created, replaced, err := ensureMountPoints(stg.rootfsFD)
	if err != nil {
		return fail(fmt.Errorf("mount points: %w", err))
	}
	for _, p := range replaced {
		log.Warn("replaced image entry with a mount point", "path", p)
	}
	rec := &artifactRecord{
		FormatVersion:            FormatVersion,
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
	if err := stg.writeRecord(rec); err != nil {
		return fail(err)
	}
	h.hit("staged")
	if failpoint.Armed("prepare:pause-staged") { // integration tests: a live preparation gc must keep
		time.Sleep(15 * time.Second)
	}
	if h.beforePublish != nil {
		h.beforePublish()
	}
	won, err := st.publish(stg, id)
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
		st.record("PublishArtifact", id)
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
		id, time.Since(start).Round(time.Millisecond), HumanBytes(counts.bytes), counts.skippedDevices)
	return artifactFor(opts.StorageRoot, rec), nil
}

// abandon ends this process's own failed preparation: quarantine its
// staging tree, abandon the intent, delete the quarantined tree (we are
// namespace root of the user namespace here).
func (st *store) abandon(ctx context.Context, cat *catalog.Catalog, opID string, lock *prepLock, h hooks, log *slog.Logger) error {
	var q string
	err := cat.Update(ctx, func(tx *catalog.Tx) error {
		op, err := tx.Operation(opID)
		if err != nil {
			return err
		}
		if op.GetLockIno() != lock.id.Ino {
			return fmt.Errorf("intent %s names another lock inode", opID)
		}
		_, err = st.settleIntent(tx, op, h.hit)
		if err == nil {
			q = quarantinePrefix + op.GetStagingName()
		}
		return err
	})
	if err != nil {
		return err
	}
	if tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
		defer unix.Close(tfd)
		if err := removeAllAt(tfd, q); err != nil {
			log.Warn("deleting the quarantined staging tree failed; the next start deletes it", "quarantine", q, "err", err)
		}
	}
	return nil
}

// HumanBytes formats a byte count as Lazaret's progress lines and state
// reports show it (B, KiB, MiB, GiB).
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Lookup finds the published artifact for imageRef without preparing it.
// It resolves the reference to its manifest digest (reading the manifest
// only, no layers; a registry reference needs the network) and validates
// the artifact it maps to. found is false when no artifact is published.
func Lookup(storageRoot, imageRef string) (Artifact, bool, error) {
	if err := checkOptions(storageRoot, imageRef); err != nil {
		return Artifact{}, false, err
	}
	img, err := resolve(context.Background(), imageRef, false)
	if err != nil {
		return Artifact{}, false, err
	}
	defer img.close()
	st, err := openStore(storageRoot, false)
	if errors.Is(err, os.ErrNotExist) {
		return Artifact{}, false, nil
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("prepare %s: %w", imageRef, err)
	}
	defer st.close()
	id := ArtifactID(img.source.ManifestDigest)
	rec, found, err := st.lookup(id, img.source.ManifestDigest)
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("prepare %s: %w", imageRef, err)
		}
		return Artifact{}, false, err
	}
	return artifactFor(storageRoot, rec), true, nil
}

// LookupID finds and validates a published artifact by its ID, e.g. one
// recorded in the Domain Store. found is false when it does not exist.
func LookupID(storageRoot, id string) (Artifact, bool, error) {
	if !ValidID(id) {
		return Artifact{}, false, fmt.Errorf("prepare: %q is not a prepared-artifact ID (want pl- and 32 hex digits)", id)
	}
	if !filepath.IsAbs(storageRoot) {
		return Artifact{}, false, fmt.Errorf("prepare: storage root %q is not an absolute path", storageRoot)
	}
	st, err := openStore(storageRoot, false)
	if errors.Is(err, os.ErrNotExist) {
		return Artifact{}, false, nil
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("prepare %s: %w", id, err)
	}
	defer st.close()
	rec, found, err := st.lookup(id, "")
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("prepare %s: %w", id, err)
		}
		return Artifact{}, false, err
	}
	return artifactFor(storageRoot, rec), true, nil
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
