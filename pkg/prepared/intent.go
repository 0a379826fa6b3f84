package prepared

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
)

// The preparer records its own steps in the Storage Catalog (schema 2):
//
//	flock(LOCK_EX) prepared/.locks/<id>                  before anything is recorded
//	catalog: BeginPreparation                           durable prepare intent (staging name,
//	                                                    the lock's inode, the preparer's pidfs
//	                                                    identity, the source image)
//	mkdirat .staging/<name>, apply layers, artifact.json descriptor-relative staging
//	renameat2(.staging/<name>, <id>, NOREPLACE)         publication of the tree
//	catalog: PublishArtifact                            the record is Published
//
// or, when it fails: renameat2(.staging/<name>, .trash/stg-<name>)
// (quarantine) → catalog: AbandonPreparation → deletion of the quarantined
// tree (here, in the user namespace; else by the next Runtime Supervisor's
// PurgeTrash).
//
// An intent whose preparer died is settled only by someone holding the
// same lock inode (the next preparer of that artifact, or gc after
// flock(LOCK_EX|LOCK_NB) succeeded): the lock being free on that exact
// inode proves no preparer is live, whatever its pid. Settling is
// deterministic from what the directories show: a valid tree at
// prepared/<id> rolls the intent forward (PublishArtifact); otherwise the
// staging tree (if any) is quarantined and the intent abandoned. A staging
// entry with no intent is never touched.

// quarantinePrefix names quarantined staging trees in prepared/.trash.
const quarantinePrefix = "stg-"

// PrepLock is a held preparation lock and the identity of its inode.
type PrepLock struct {
	fd int
	// ID is the lock file's inode, recorded in the prepare intent.
	ID catalog.FileIdentity
}

// Release drops the lock.
func (l *PrepLock) Release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// SourceOfRecord is the catalog's view of an artifact.json.
func SourceOfRecord(rec *Record) catalog.SourceImage {
	s := catalog.SourceImage{ImageName: rec.Source.Ref, ManifestDigest: rec.Source.ManifestDigest, ConfigDigest: rec.Source.ConfigDigest}
	for _, l := range rec.Layers {
		s.LayerDigests = append(s.LayerDigests, l.Digest)
		s.DiffIDs = append(s.DiffIDs, l.DiffID)
	}
	return s
}

// ProbeTreeAt reports, for catalog.RecoverReclaim, whether prepared/<id>
// is gone, idle (flock(LOCK_SH|LOCK_NB) succeeds: no gc holds it
// exclusively) or held exclusively by a live gc.
func (st *Store) ProbeTreeAt(id string) (catalog.TreeState, error) {
	fd, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return catalog.TreeGone, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	for {
		err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return catalog.TreeIdle, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return catalog.TreeBusy, nil
	}
	return 0, fmt.Errorf("flock %s: %w", id, err)
}

// ProbeTree is ProbeTreeAt for callers outside the preparer (the Host
// Coordinator's lease acquisition recovers an interrupted reclamation).
func ProbeTree(storageRoot string) func(id string) (catalog.TreeState, error) {
	return func(id string) (catalog.TreeState, error) {
		if !ValidID(id) {
			return 0, fmt.Errorf("prepare: %q is not a prepared-artifact ID", id)
		}
		rootFD, err := unix.Open(storageRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, &os.PathError{Op: "open", Path: storageRoot, Err: err}
		}
		defer unix.Close(rootFD)
		pfd, err := openBeneath(rootFD, preparedDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) {
			return catalog.TreeGone, nil // no prepared/ at all: no tree
		}
		if err != nil {
			return 0, err
		}
		defer unix.Close(pfd)
		return (&Store{preparedFD: pfd}).ProbeTreeAt(id)
	}
}

// tryIntentLock takes, without waiting, the preparation lock an intent
// names, checking it is the very inode the preparer held. held reports a
// live preparer; why explains a lock that cannot be judged.
func (st *Store) tryIntentLock(op *v1.PreparationOperationRecordV1) (l *PrepLock, held bool, why string, err error) {
	lfd, err := openBeneath(st.preparedFD, locksDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, "its preparation lock directory is missing: cannot prove the preparer gone", nil
	}
	if err != nil {
		return nil, false, "", err
	}
	defer unix.Close(lfd)
	fd, err := openBeneath(lfd, op.GetArtifactId(), unix.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, "its preparation lock file is missing: cannot prove the preparer gone", nil
	}
	if err != nil {
		return nil, false, "", err
	}
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		unix.Close(fd)
		return nil, false, "", err
	}
	if op.GetLockIno() == 0 || uint64(sb.Dev) != op.GetLockDev() || sb.Ino != op.GetLockIno() {
		unix.Close(fd)
		return nil, false, fmt.Sprintf("its preparation lock is inode %d:%d, the intent names %d:%d: cannot prove the preparer gone", sb.Dev, sb.Ino, op.GetLockDev(), op.GetLockIno()), nil
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		unix.Close(fd)
		return nil, true, "", nil
	}
	if err != nil {
		unix.Close(fd)
		return nil, false, "", err
	}
	return &PrepLock{fd: fd, ID: catalog.FileIdentity{Dev: uint64(sb.Dev), Ino: sb.Ino}}, false, "", nil
}

// SettleIntent ends the Running intent op of a preparer proven gone (the
// caller holds its preparation lock inode), deterministically: a valid
// tree at prepared/<artifact> from this intent's image rolls it forward;
// otherwise its staging tree, if any, is quarantined into prepared/.trash
// and the intent abandoned. It returns what it did.
func (st *Store) SettleIntent(tx *catalog.Tx, op *v1.PreparationOperationRecordV1, hit func(string)) (string, error) {
	id := op.GetArtifactId()
	art, err := tx.Artifact(id)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return "", err
	}
	if art != nil && art.GetState() == catalog.Preparing && art.GetOperationId() == op.GetOperationId() {
		if rec, found, err := st.Lookup(id, op.GetManifestDigest()); err == nil && found {
			// Published by rename before the preparer died.
			if err := tx.PublishArtifact(op.GetOperationId(), rec.RootfsBytes); err != nil {
				return "", err
			}
			// The dead preparer's rename and this record are the model's
			// publication.
			st.RecordStep("PublishArtifact", id)
			return "published (the tree was renamed into place before the preparer died)", nil
		}
	}
	q := ""
	name := op.GetStagingName()
	var sb unix.Stat_t
	if err := unix.Fstatat(st.stagingFD, name, &sb, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		tfd, err := openOrCreateDir(st.preparedFD, trashDir, 0o700, true)
		if err != nil {
			return "", err
		}
		defer unix.Close(tfd)
		q = quarantinePrefix + name
		if err := unix.Renameat2(st.stagingFD, name, tfd, q, unix.RENAME_NOREPLACE); err != nil && !errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("quarantine staging tree %s: %w", name, &os.LinkError{Op: "renameat2", Old: name, New: q, Err: err})
		}
		for _, fd := range []int{tfd, st.stagingFD} {
			if err := unix.Fsync(fd); err != nil {
				return "", err
			}
		}
		hit("quarantined")
	} else if !errors.Is(err, unix.ENOENT) {
		return "", err
	}
	if _, err := tx.AbandonPreparation(op.GetOperationId(), q); err != nil {
		return "", err
	}
	st.RecordStep("RecoverStage", id)
	if q == "" {
		return "abandoned (its staging tree was never created or was already quarantined)", nil
	}
	return "quarantined into prepared/.trash/" + q + " and abandoned", nil
}

func isQuarantine(name string) bool { return strings.HasPrefix(name, quarantinePrefix) }
