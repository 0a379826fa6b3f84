package prepared

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
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
	ID FileIdentity
}

// Release drops the lock.
func (l *PrepLock) Release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// TryIntentLock takes, without waiting, the preparation lock an intent
// names, checking it is the very inode the preparer held. held reports a
// live preparer; why explains a lock that cannot be judged.
func (st *Store) TryIntentLock(op *v1.PreparationOperationRecordV1) (l *PrepLock, held bool, why string, err error) {
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
	return &PrepLock{fd: fd, ID: FileIdentity{Dev: uint64(sb.Dev), Ino: sb.Ino}}, false, "", nil
}

func isQuarantine(name string) bool { return strings.HasPrefix(name, quarantinePrefix) }
