package prepared

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"golang.org/x/sys/unix"
)

// Prepared artifacts are shared by every Domain of the user and reclaimed by
// `lazaret gc` (OR-7). The safety rule is physical and independent of any
// process being alive or dead: a Runtime Supervisor that exposes an artifact
// holds flock(LOCK_SH) on the artifact's directory for its whole life (Hold);
// GC reclaims an artifact only while it holds flock(LOCK_EX|LOCK_NB) on it,
// and reclaiming is one rename of prepared/<id> into prepared/.trash (so a
// half-deleted tree is never visible as an artifact). A holder re-checks,
// after locking, that the directory it locked is still prepared/<id>.
// Deleting the trash (subordinate-uid files) happens inside the user
// namespace (PurgeTrash): by `lazaret gc` itself, through lazaret-rs's
// state-maintenance role, and by every Runtime Supervisor in the background
// (cancelled at its exit; what is left waits for the next one).
//
//	prepared/
//	  .used/<id>      mtime = last time a Runtime Supervisor held the artifact
//	  .trash/<id>.<n> reclaimed trees waiting for deletion
const (
	usedDir  = ".used"
	trashDir = ".trash"
)

// ErrGone marks an artifact that disappeared (reclaimed) before it could be
// held; the caller prepares it again.
var ErrGone = errors.New("prepared artifact was reclaimed")

// Use is a usage hold on a published artifact; Release ends it (exiting
// does too: the kernel drops the lock with the last descriptor).
type Use struct{ fd int }

// Release drops the hold.
func (u *Use) Release() {
	if u != nil && u.fd >= 0 {
		unix.Close(u.fd)
		u.fd = -1
	}
}

// Hold takes a shared usage lock on artifact id. It returns ErrGone when the
// artifact is no longer published (reclaimed since it was looked up).
func Hold(storageRoot, id string) (*Use, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("prepare: %q is not a prepared-artifact ID", id)
	}
	st, err := OpenStore(storageRoot, false)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	defer st.Close()
	fd, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("hold %s: %w", id, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_SH)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hold %s: flock: %w", id, err)
	}
	// The directory locked must still be the published one.
	again, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hold %s: %w", id, ErrGone)
	}
	var a, b unix.Stat_t
	unix.Fstat(fd, &a)
	unix.Fstat(again, &b)
	unix.Close(again)
	if a.Dev != b.Dev || a.Ino != b.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("hold %s: %w", id, ErrGone)
	}
	if ufd, err := openOrCreateDir(st.preparedFD, usedDir, 0o700, true); err == nil {
		if f, err := openBeneath(ufd, id, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW, 0o600); err == nil {
			unix.Close(f)
		}
		unix.UtimesNanoAt(ufd, id, nil, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(ufd)
	}
	return &Use{fd: fd}, nil
}

// GCPolicy chooses which unused artifacts GC reclaims.
type GCPolicy struct {
	// Keep is how many of the most recently used unused artifacts are kept.
	Keep int
	// MinAge: an artifact used (or prepared) more recently is kept.
	MinAge time.Duration
	// MaxBytes, when > 0, is a size budget for all artifacts: beyond it,
	// unused artifacts are reclaimed least recently used first regardless
	// of Keep and MinAge.
	MaxBytes int64
	// Catalog is the Storage Catalog's say (OR-7; nil: the Storage Root's
	// own): an artifact with any catalog lease is kept; reclamation moves its
	// record to Reclaiming under storage-catalog.lock before the tree moves;
	// prepare intents decide which staging trees are abandoned.
	Catalog *catalog.Catalog
	// Ctx bounds the catalog operations (nil: context.Background()).
	Ctx context.Context
	// Step, when set, is called at each step of tla/PreparedLower.tla gc
	// takes (BeginReclaim, ReclaimArtifact; RecoverStage or
	// PublishArtifact for a dead preparer's intent), inside the Storage
	// Catalog transaction that records it (see Options.Step).
	Step func(action, artifactID string)
	// At, when set, is called at each of GCSteps right after its failpoint
	// (tests crash there).
	At func(step string)
}

// GCSteps are gc's crash points, in order (failpoint "gc:<step>").
var GCSteps = []string{"recovered", "quarantined", "reclaiming", "renamed", "removed"}

// GCEntry reports one entry of prepared/ and what GC did or would do.
type GCEntry struct {
	Name     string    `json:"name"`
	Image    string    `json:"image,omitempty"`
	Bytes    int64     `json:"bytes"`
	LastUsed time.Time `json:"last_used"`
	// Action: "keep", "reclaim" (dry run) or "reclaimed".
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// GCResult is GC's report.
type GCResult struct {
	Entries []GCEntry `json:"entries"`
	// Recovered lists interrupted reclamations and abandoned prepare
	// intents settled before deciding.
	Recovered []string `json:"recovered,omitempty"`
	// TrashEntries wait for deletion: by `lazaret gc` itself in the user
	// namespace (PurgeTrash through the state-maintenance role), or else
	// by the next Runtime Supervisor.
	TrashEntries int `json:"trash_entries"`
}

// hit is a gc crash point: failpoint "gc:<step>", then p.At.
func (p GCPolicy) hit(step string) {
	failpoint.Hit("gc:" + step)
	if p.At != nil {
		p.At(step)
	}
}

// GC reclaims unused prepared artifacts under policy (OR-7). It never
// touches an artifact any Runtime Supervisor holds or any catalog lease
// names, a staging tree without a prepare intent or whose preparer is live
// (its preparation lock held), or anything in prepared/ that is not a valid
// artifact (foreign trees are reported and kept). A staging tree whose
// intent's preparer is gone is quarantined through that intent. Deletion
// (subordinate-uid files) happens inside the user namespace (PurgeTrash):
// `lazaret gc` runs it right after GC, a Runtime Supervisor at its start.
func GC(storageRoot string, p GCPolicy, dryRun bool, now time.Time) (GCResult, error) {
	var res GCResult
	st, err := OpenStore(storageRoot, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	defer st.Close()
	st.step = p.Step
	if p.Ctx == nil {
		p.Ctx = context.Background()
	}
	if p.Catalog == nil {
		if p.Catalog, err = catalog.New(storageRoot, catalog.Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
			return res, err
		}
	}
	// First settle what dead preparers and an interrupted gc left.
	intentEntries := map[string]GCEntry{}
	if p.Catalog != nil {
		run := p.Catalog.Update
		if dryRun {
			run = p.Catalog.View
		}
		if err := run(p.Ctx, func(tx *catalog.Tx) error {
			arts, err := tx.Artifacts()
			if err != nil {
				return err
			}
			for _, a := range arts {
				if a.GetState() != catalog.Reclaiming {
					continue
				}
				if dryRun {
					res.Recovered = append(res.Recovered, fmt.Sprintf("%s: interrupted reclamation (would be completed or rolled back)", a.GetArtifactId()))
					continue
				}
				out, err := tx.RecoverReclaim(a.GetArtifactId(), st.ProbeTreeAt)
				if err != nil {
					return err
				}
				res.Recovered = append(res.Recovered, fmt.Sprintf("%s: interrupted reclamation %s", a.GetArtifactId(), out))
				st.RecordReclaim(out, a.GetArtifactId())
			}
			ops, err := tx.RunningOperations()
			if err != nil {
				return err
			}
			for _, op := range ops {
				e := GCEntry{Name: stagingDir + "/" + op.GetStagingName(), Image: op.GetImageName(), Action: "keep",
					LastUsed: time.Unix(0, op.GetUpdatedUnixNano())}
				l, held, why, err := st.tryIntentLock(op)
				switch {
				case err != nil:
					e.Reason = fmt.Sprintf("prepare intent %s: %v; kept", op.GetOperationId(), err)
				case held:
					e.Reason = fmt.Sprintf("preparation in progress (intent %s, its preparation lock is held)", op.GetOperationId())
				case why != "":
					e.Reason = fmt.Sprintf("prepare intent %s: %s; kept", op.GetOperationId(), why)
				case dryRun:
					l.Release()
					e.Action, e.Reason = "reclaim", fmt.Sprintf("abandoned: prepare intent %s's preparer is gone (its lock is free)", op.GetOperationId())
				default:
					what, err := st.SettleIntent(tx, op, p.hit)
					l.Release()
					if err != nil {
						return err
					}
					e.Action, e.Reason = "reclaimed", fmt.Sprintf("abandoned prepare intent %s (its preparer is gone): %s", op.GetOperationId(), what)
					res.Recovered = append(res.Recovered, op.GetOperationId()+": "+what)
				}
				intentEntries[op.GetStagingName()] = e
			}
			return nil
		}); err != nil {
			return res, fmt.Errorf("gc: settle interrupted work: %w", err)
		}
		if !dryRun {
			p.hit("recovered")
		}
	}
	stagingNames, err := dirNames(st.stagingFD)
	if err != nil {
		return res, err
	}
	for _, n := range stagingNames {
		if e, ok := intentEntries[n]; ok {
			res.Entries = append(res.Entries, e)
			delete(intentEntries, n)
			continue
		}
		res.Entries = append(res.Entries, GCEntry{Name: stagingDir + "/" + n, Action: "keep", Reason: "no prepare intent names it; never touched"})
	}
	for _, e := range intentEntries { // intents whose staging tree is gone
		res.Entries = append(res.Entries, e)
	}
	names, err := dirNames(st.preparedFD)
	if err != nil {
		return res, err
	}
	type cand struct {
		e  GCEntry
		fd int
	}
	var free []*cand
	var total int64
	defer func() {
		for _, c := range free {
			if c.fd >= 0 {
				unix.Close(c.fd)
			}
		}
	}()
	for _, n := range names {
		switch n {
		case stagingDir, usedDir, trashDir, locksDir:
			continue
		}
		e := GCEntry{Name: n, Action: "keep"}
		if !ValidID(n) {
			e.Reason = "foreign: not a prepared artifact; never deleted"
			res.Entries = append(res.Entries, e)
			continue
		}
		rec, found, err := st.Lookup(n, "")
		if err != nil || !found {
			e.Reason = fmt.Sprintf("not a valid artifact (%v); never deleted", err)
			res.Entries = append(res.Entries, e)
			continue
		}
		e.Image, e.Bytes, e.LastUsed = rec.Source.Ref, rec.RootfsBytes, rec.Created
		var ust unix.Stat_t
		if unix.Fstatat(st.preparedFD, usedDir+"/"+n, &ust, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if t := time.Unix(ust.Mtim.Unix()); t.After(e.LastUsed) {
				e.LastUsed = t
			}
		}
		total += e.Bytes
		fd, err := openBeneath(st.preparedFD, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			e.Reason = err.Error()
			res.Entries = append(res.Entries, e)
			continue
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			e.Reason = "in use by a running Domain"
			res.Entries = append(res.Entries, e)
			continue
		}
		if p.Catalog != nil {
			var leases int
			var state catalog.ArtifactState
			err := p.Catalog.View(p.Ctx, func(tx *catalog.Tx) error {
				ls, err := tx.Leases(n)
				leases = len(ls)
				if a, aerr := tx.Artifact(n); aerr == nil {
					state = a.GetState()
				}
				return err
			})
			if err != nil || leases > 0 || (state != 0 && state != catalog.Published) {
				unix.Close(fd)
				switch {
				case err != nil:
					e.Reason = fmt.Sprintf("Storage Catalog leases unknown (%v); kept", err)
				case leases > 0:
					e.Reason = fmt.Sprintf("leased by %d generation(s) in the Storage Catalog", leases)
				default:
					e.Reason = fmt.Sprintf("the Storage Catalog records it %v", state)
				}
				res.Entries = append(res.Entries, e)
				continue
			}
		}
		free = append(free, &cand{e: e, fd: fd})
	}
	sort.Slice(free, func(i, j int) bool { return free[i].e.LastUsed.After(free[j].e.LastUsed) })
	for i, c := range free {
		switch {
		case i < p.Keep:
			c.e.Reason = fmt.Sprintf("among the %d most recently used", p.Keep)
		case now.Sub(c.e.LastUsed) < p.MinAge:
			c.e.Reason = fmt.Sprintf("used within %s", p.MinAge)
		default:
			c.e.Action, c.e.Reason = "reclaim", "unused"
		}
	}
	if p.MaxBytes > 0 {
		over := total
		for _, c := range free {
			if c.e.Action == "reclaim" {
				over -= c.e.Bytes
			}
		}
		for i := len(free) - 1; i >= 0 && over > p.MaxBytes; i-- {
			if c := free[i]; c.e.Action == "keep" {
				c.e.Action, c.e.Reason = "reclaim", fmt.Sprintf("over the size budget of %d bytes", p.MaxBytes)
				over -= c.e.Bytes
			}
		}
	}
	var tfd = -1
	for _, c := range free {
		if c.e.Action == "reclaim" && !dryRun {
			if tfd < 0 {
				if tfd, err = openOrCreateDir(st.preparedFD, trashDir, 0o700, true); err != nil {
					return res, err
				}
				defer unix.Close(tfd)
			}
			if err := st.reclaim(p, c.e.Name, tfd, now); err != nil {
				c.e.Action, c.e.Reason = "keep", err.Error()
			} else {
				c.e.Action = "reclaimed"
			}
		}
		unix.Close(c.fd)
		c.fd = -1
		res.Entries = append(res.Entries, c.e)
	}
	sort.Slice(res.Entries, func(i, j int) bool { return res.Entries[i].Name < res.Entries[j].Name })
	res.TrashEntries, _ = countTrash(st)
	return res, nil
}

// reclaim moves one unheld, unleased artifact (whose directory the caller
// holds flock(LOCK_EX) on) into prepared/.trash: the catalog record becomes
// Reclaiming naming the trash entry, the tree is renamed, the record is
// removed. An interruption anywhere is settled by RecoverReclaim (next gc,
// preparer or lease acquisition).
func (st *Store) reclaim(p GCPolicy, id string, tfd int, now time.Time) error {
	dst := id + "." + strconv.FormatInt(now.UnixNano(), 10)
	recorded := false
	if p.Catalog != nil {
		if err := p.Catalog.Update(p.Ctx, func(tx *catalog.Tx) error {
			_, err := tx.Artifact(id)
			if errors.Is(err, catalog.ErrNotFound) {
				return nil // a tree the catalog never recorded has no lease
			}
			if err != nil {
				return err
			}
			recorded = true
			if err := tx.BeginReclaim(id, dst); err != nil {
				return err
			}
			st.RecordStep("BeginReclaim", id)
			return nil
		}); err != nil {
			return fmt.Errorf("the Storage Catalog refused reclamation: %w", err)
		}
	}
	p.hit("reclaiming")
	if err := unix.Renameat2(st.preparedFD, id, tfd, dst, unix.RENAME_NOREPLACE); err != nil {
		err = fmt.Errorf("reclaim %s: %w", id, &os.PathError{Op: "renameat2", Path: dst, Err: err})
		if recorded { // the tree never moved: back to Published
			if rerr := p.Catalog.Update(p.Ctx, func(tx *catalog.Tx) error {
				if err := tx.RollbackReclaim(id); err != nil {
					return err
				}
				st.RecordStep("RollbackReclaim", id)
				return nil
			}); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		return err
	}
	for _, fd := range []int{tfd, st.preparedFD} {
		if err := unix.Fsync(fd); err != nil {
			return fmt.Errorf("reclaim %s: fsync: %w", id, err)
		}
	}
	unix.Unlinkat(st.preparedFD, usedDir+"/"+id, 0)
	p.hit("renamed")
	if recorded {
		if err := p.Catalog.Update(p.Ctx, func(tx *catalog.Tx) error {
			if err := tx.RemoveArtifact(id); err != nil {
				return err
			}
			st.RecordStep("ReclaimArtifact", id)
			return nil
		}); err != nil {
			return fmt.Errorf("reclaimed, but the Storage Catalog record stays Reclaiming until the next gc or preparation: %w", err)
		}
	}
	p.hit("removed")
	return nil
}

// TrashEntries counts the entries of storageRoot's prepared trash: what gc
// reclaimed and a settled prepare intent quarantined, waiting for
// PurgeTrash. A missing Storage Root or trash counts none.
func TrashEntries(storageRoot string) (int, error) {
	st, err := OpenStore(storageRoot, false)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer st.Close()
	return countTrash(st)
}

func countTrash(st *Store) (int, error) {
	tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, nil
	}
	defer unix.Close(tfd)
	n, err := dirNames(tfd)
	return len(n), err
}

// PurgeTrash deletes reclaimed trees and returns how many it deleted. It
// must run as namespace root of the user's full-map user namespace (the
// Runtime Supervisor, or the state-maintenance role `lazaret gc` runs),
// where the subordinate-uid files can be removed. It stops before the next
// directory entry once ctx is done and returns ctx's error (wrapped): what
// it deleted stays deleted, the rest stays in the trash for the next call.
// Two concurrent calls may delete one trash.
func PurgeTrash(ctx context.Context, storageRoot string) (int, error) {
	st, err := OpenStore(storageRoot, false)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer st.Close()
	tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	names, err := dirNames(tfd)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, n := range names {
		if !strings.HasPrefix(n, idPrefix) && !isQuarantine(n) {
			continue // only what gc or a prepare intent put there
		}
		if err := removeAllAtCtx(ctx, tfd, n); err != nil {
			return deleted, fmt.Errorf("delete reclaimed %s: %w", n, err)
		}
		deleted++
	}
	return deleted, nil
}

func dirNames(dirfd int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil { // a dup shares the offset
		return nil, err
	}
	return f.Readdirnames(-1)
}

// locksDir holds one preparation lock file per artifact ID (never cleaned
// by the staging cleanup, so a waiter and a holder always share an inode).
const locksDir = ".locks"

// LockPreparation takes the exclusive preparation lock of artifact id,
// waiting (bounded by ctx) while another process prepares it.
func (st *Store) LockPreparation(ctx context.Context, id string) (*PrepLock, error) {
	lfd, err := openOrCreateDir(st.preparedFD, locksDir, 0o700, true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(lfd)
	fd, err := openBeneath(lfd, id, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		unix.Close(fd)
		return nil, err
	}
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &PrepLock{fd: fd, ID: catalog.FileIdentity{Dev: uint64(sb.Dev), Ino: sb.Ino}}, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			unix.Close(fd)
			return nil, fmt.Errorf("preparation lock %s: %w", id, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			unix.Close(fd)
			return nil, fmt.Errorf("waiting for a concurrent preparation of %s: %w", id, ctx.Err())
		case <-t.C:
		}
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}
