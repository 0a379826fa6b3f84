package prepare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

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
// namespace, in the next Runtime Supervisor (PurgeTrash).
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
	st, err := openStore(storageRoot, false)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", id, err)
	}
	defer st.close()
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
	// Catalog, when set, is the Storage Catalog's say (OR-7): an artifact
	// with any catalog lease is kept, and reclamation moves its record to
	// Reclaiming under storage-catalog.lock before the tree moves.
	Catalog Reclaimer
}

// Reclaimer is the Storage Catalog as GC sees it (catalog.GCReclaimer).
type Reclaimer interface {
	// Leases counts the artifact's catalog leases.
	Leases(id string) (int, error)
	// BeginReclaim refuses while any lease exists; otherwise the record
	// (if any) becomes Reclaiming.
	BeginReclaim(id string) error
	// Reclaimed removes the record after the tree left prepared/.
	Reclaimed(id string) error
}

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
	// TrashEntries wait for deletion in the next Runtime Supervisor.
	TrashEntries int `json:"trash_entries"`
}

// GC reclaims unused prepared artifacts under policy (OR-7). It never
// touches an artifact any Runtime Supervisor holds, the staging directory
// (in-progress preparations are flock-held and stale ones are cleaned by
// the preparer itself), or anything in prepared/ that is not a valid
// artifact (foreign trees are reported and kept).
func GC(storageRoot string, p GCPolicy, dryRun bool, now time.Time) (GCResult, error) {
	var res GCResult
	st, err := openStore(storageRoot, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	defer st.close()
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
		rec, found, err := st.lookup(n, "")
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
			n, err := p.Catalog.Leases(e.Name)
			if err != nil || n > 0 {
				unix.Close(fd)
				e.Reason = fmt.Sprintf("leased by %d generation(s) in the Storage Catalog", n)
				if err != nil {
					e.Reason = fmt.Sprintf("Storage Catalog leases unknown (%v); kept", err)
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
			if p.Catalog != nil {
				if err := p.Catalog.BeginReclaim(c.e.Name); err != nil {
					c.e.Action, c.e.Reason = "keep", fmt.Sprintf("the Storage Catalog refused reclamation: %v", err)
					unix.Close(c.fd)
					c.fd = -1
					res.Entries = append(res.Entries, c.e)
					continue
				}
			}
			dst := c.e.Name + "." + strconv.FormatInt(now.UnixNano(), 10)
			if err := unix.Renameat2(st.preparedFD, c.e.Name, tfd, dst, unix.RENAME_NOREPLACE); err != nil {
				return res, fmt.Errorf("reclaim %s: %w", c.e.Name, &os.PathError{Op: "renameat2", Path: dst, Err: err})
			}
			unix.Unlinkat(st.preparedFD, usedDir+"/"+c.e.Name, 0)
			c.e.Action = "reclaimed"
			if p.Catalog != nil {
				if err := p.Catalog.Reclaimed(c.e.Name); err != nil {
					c.e.Reason += fmt.Sprintf(" (Storage Catalog record kept: %v)", err)
				}
			}
		}
		unix.Close(c.fd)
		c.fd = -1
		res.Entries = append(res.Entries, c.e)
	}
	if tfd >= 0 {
		unix.Fsync(tfd)
		unix.Fsync(st.preparedFD)
	}
	sort.Slice(res.Entries, func(i, j int) bool { return res.Entries[i].Name < res.Entries[j].Name })
	res.TrashEntries, _ = countTrash(st)
	return res, nil
}

func countTrash(st *store) (int, error) {
	tfd, err := openBeneath(st.preparedFD, trashDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, nil
	}
	defer unix.Close(tfd)
	n, err := dirNames(tfd)
	return len(n), err
}

// PurgeTrash deletes reclaimed trees. It must run as namespace root of the
// user's full-map user namespace (the Runtime Supervisor), where the
// subordinate-uid files can be removed.
func PurgeTrash(storageRoot string) (int, error) {
	st, err := openStore(storageRoot, false)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer st.close()
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
	for _, n := range names {
		if !strings.HasPrefix(n, idPrefix) {
			continue // only what GC put there
		}
		if err := removeAllAt(tfd, n); err != nil {
			return 0, fmt.Errorf("delete reclaimed %s: %w", n, err)
		}
	}
	return len(names), nil
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

// lockPreparation takes the exclusive preparation lock of artifact id,
// waiting (bounded by ctx) while another process prepares it.
func (st *store) lockPreparation(ctx context.Context, id string) (func(), error) {
	lfd, err := openOrCreateDir(st.preparedFD, locksDir, 0o700, true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(lfd)
	fd, err := openBeneath(lfd, id, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
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
