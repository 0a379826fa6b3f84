package preparedcatalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/prepared"
	"golang.org/x/sys/unix"
)

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
	st, err := prepared.OpenStore(storageRoot, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	defer st.Close()
	st.SetStep(p.Step)
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
				out, err := tx.RecoverReclaim(a.GetArtifactId(), ProbeTreeAt(st))
				if err != nil {
					return err
				}
				res.Recovered = append(res.Recovered, fmt.Sprintf("%s: interrupted reclamation %s", a.GetArtifactId(), out))
				RecordReclaim(st, out, a.GetArtifactId())
			}
			ops, err := tx.RunningOperations()
			if err != nil {
				return err
			}
			for _, op := range ops {
				e := GCEntry{Name: prepared.StagingPath(op.GetStagingName()), Image: op.GetImageName(), Action: "keep",
					LastUsed: time.Unix(0, op.GetUpdatedUnixNano())}
				l, held, why, err := st.TryIntentLock(op)
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
					what, err := SettleIntent(st, tx, op, p.hit)
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
	stagingNames, err := st.StagingNames()
	if err != nil {
		return res, err
	}
	for _, n := range stagingNames {
		if e, ok := intentEntries[n]; ok {
			res.Entries = append(res.Entries, e)
			delete(intentEntries, n)
			continue
		}
		res.Entries = append(res.Entries, GCEntry{Name: prepared.StagingPath(n), Action: "keep", Reason: "no prepare intent names it; never touched"})
	}
	for _, e := range intentEntries { // intents whose staging tree is gone
		res.Entries = append(res.Entries, e)
	}
	names, err := st.ArtifactNames()
	if err != nil {
		return res, err
	}
	type cand struct {
		e    GCEntry
		lock *prepared.TreeLock
	}
	var free, damaged []*cand
	var total int64
	defer func() {
		for _, c := range append(free, damaged...) {
			c.lock.Release()
		}
	}()
	for _, n := range names {
		e := GCEntry{Name: n, Action: "keep"}
		if !prepared.ValidID(n) {
			e.Reason = "foreign: not a prepared artifact; never deleted"
			res.Entries = append(res.Entries, e)
			continue
		}
		rec, found, err := st.Lookup(n, "")
		broken := errors.Is(err, prepared.ErrCorrupt)
		if (err != nil && !broken) || (err == nil && !found) {
			e.Reason = fmt.Sprintf("not a valid artifact (%v); never deleted", err)
			res.Entries = append(res.Entries, e)
			continue
		}
		if broken {
			// Damaged (its record or tree unreadable): no Domain can start
			// from it, and a start that finds it fails until it is gone. It
			// is reclaimed as any unused artifact is — held by no Runtime
			// Supervisor, leased by no generation, Published or unrecorded
			// in the catalog — whatever the policy.
			e.Reason = fmt.Sprintf("damaged (%v)", err)
		} else {
			e.Image, e.Bytes, e.LastUsed = rec.Source.Ref, rec.RootfsBytes, rec.Created
			if t, ok := st.LastUsed(n); ok && t.After(e.LastUsed) {
				e.LastUsed = t
			}
			total += e.Bytes
		}
		kept := "" // what a kept damaged artifact's reason starts with
		if broken {
			kept = e.Reason + "; kept while "
		}
		lock, inUse, err := st.LockExclusive(n)
		switch {
		case err != nil:
			e.Reason = kept + err.Error()
			res.Entries = append(res.Entries, e)
			continue
		case inUse:
			e.Reason = kept + "in use by a running Domain"
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
				lock.Release()
				switch {
				case err != nil:
					e.Reason = kept + fmt.Sprintf("Storage Catalog leases unknown (%v); kept", err)
				case leases > 0:
					e.Reason = kept + fmt.Sprintf("leased by %d generation(s) in the Storage Catalog", leases)
				default:
					e.Reason = kept + fmt.Sprintf("the Storage Catalog records it %v", state)
				}
				res.Entries = append(res.Entries, e)
				continue
			}
		}
		if broken {
			e.Action, e.Reason = "reclaim", e.Reason+": it cannot be used; the next start prepares its image again"
			damaged = append(damaged, &cand{e: e, lock: lock})
			continue
		}
		free = append(free, &cand{e: e, lock: lock})
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
	for _, c := range append(free, damaged...) {
		if c.e.Action == "reclaim" && !dryRun {
			if err := reclaim(st, p, c.e.Name, now); err != nil {
				c.e.Action, c.e.Reason = "keep", err.Error()
			} else {
				c.e.Action = "reclaimed"
			}
		}
		c.lock.Release()
		res.Entries = append(res.Entries, c.e)
	}
	sort.Slice(res.Entries, func(i, j int) bool { return res.Entries[i].Name < res.Entries[j].Name })
	res.TrashEntries, _ = st.TrashCount()
	return res, nil
}

// reclaim moves one unheld, unleased artifact (whose directory the caller
// holds the TreeLock of) into prepared/.trash: the catalog record becomes
// Reclaiming naming the trash entry, the tree is renamed, the record is
// removed. An interruption anywhere is settled by RecoverReclaim (next gc,
// preparer or lease acquisition).
func reclaim(st *prepared.Store, p GCPolicy, id string, now time.Time) error {
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
	if moved, err := st.MoveToTrash(id, dst); err != nil {
		if recorded && !moved { // the tree never moved: back to Published
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
