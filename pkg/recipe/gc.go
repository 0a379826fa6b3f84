package recipe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// UsedFile is the stamp in a recipe image's layout whose modification time
// is the image's last use: `lazaret run` and `lazaret image build` touch it
// whenever they resolve the image.
const UsedFile = "lazaret-last-used"

// trashPrefix names a recipe image moved aside for deletion; a leftover one
// (a deletion interrupted by a crash) is deleted by the next GC.
const trashPrefix = ".trash-"

// MarkUsed records that the recipe image at layout was used at now.
func MarkUsed(layout string, now time.Time) error {
	p := filepath.Join(layout, UsedFile)
	if err := os.Chtimes(p, now, now); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return err
	}
	return os.Chtimes(p, now, now)
}

// GCEntry is one recipe image GC looked at.
type GCEntry struct {
	// Name is the image's directory in the image store (recipe-…).
	Name string `json:"name"`
	Base string `json:"base,omitempty"`
	// Bytes is what reclaiming it frees (layers shared with its base by a
	// hard link are not counted).
	Bytes    int64     `json:"bytes"`
	LastUsed time.Time `json:"last_used"`
	// Action: "keep", "reclaim" (dry run) or "reclaimed".
	Action string `json:"action"`
	Reason string `json:"reason"`
}

// GCPolicy says which recipe images GC keeps: those a profile names
// (Wanted maps an image's store name to the profile that names it), those
// used within MinAge, and those whose build lock is held (a build or a
// check in progress).
type GCPolicy struct {
	Wanted map[string]string
	MinAge time.Duration
}

// GC reclaims the recipe images in imagesDir (the image store) that policy
// does not keep: each is moved aside by one rename under its build lock and
// then deleted, so a crash leaves it either in place or moved aside for the
// next GC. Base images (debian, busybox, …) and anything not named recipe-…
// are never touched. With dryRun it only reports.
func GC(imagesDir string, policy GCPolicy, dryRun bool, now time.Time) ([]GCEntry, error) {
	names, err := os.ReadDir(imagesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the image store: %w", err)
	}
	var out []GCEntry
	for _, d := range names {
		name := d.Name()
		if strings.HasPrefix(name, trashPrefix) && !dryRun {
			if err := os.RemoveAll(filepath.Join(imagesDir, name)); err != nil {
				return out, fmt.Errorf("delete the recipe image moved aside at %s: %w", filepath.Join(imagesDir, name), err)
			}
			continue
		}
		if !d.IsDir() || !strings.HasPrefix(name, "recipe-") {
			continue
		}
		e, err := gcOne(imagesDir, name, policy, dryRun, now)
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func gcOne(imagesDir, name string, policy GCPolicy, dryRun bool, now time.Time) (GCEntry, error) {
	layout := filepath.Join(imagesDir, name)
	e := GCEntry{Name: name, Bytes: treeBytes(layout), LastUsed: lastUsed(layout)}
	if rec, err := ReadRecord(layout); err == nil {
		e.Base = rec.Base
	}
	keep := func(why string) (GCEntry, error) {
		e.Action, e.Reason = "keep", why
		return e, nil
	}
	if p, ok := policy.Wanted[name]; ok {
		return keep("profile " + p + " uses it")
	}
	if age := now.Sub(e.LastUsed); age < policy.MinAge {
		return keep(fmt.Sprintf("used %s ago (--min-age %s)", age.Round(time.Second), policy.MinAge))
	}
	lock, held, err := tryLock(layout)
	if err != nil {
		return e, err
	}
	if held {
		return keep("a build or run holds its lock")
	}
	defer lock.Close()
	e.Reason = "no profile of the configuration uses it"
	if dryRun {
		e.Action = "reclaim"
		return e, nil
	}
	aside := filepath.Join(imagesDir, trashPrefix+name)
	if err := os.Rename(layout, aside); err != nil {
		return e, errdefs.Mark(fmt.Errorf("move the recipe image %s aside: %w", layout, err), errdefs.ErrRefused)
	}
	if err := os.RemoveAll(aside); err != nil {
		return e, fmt.Errorf("delete the recipe image moved aside at %s (the next lazaret gc retries): %w", aside, err)
	}
	e.Action = "reclaimed"
	return e, nil
}

// tryLock takes layout's build lock without waiting; held reports that
// another process has it.
func tryLock(layout string) (f *os.File, held bool, err error) {
	dir := filepath.Join(filepath.Dir(layout), ".locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	f, err = os.OpenFile(filepath.Join(dir, filepath.Base(layout)+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open recipe build lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("lock recipe build: %w", err)
	}
	return f, false, nil
}

// lastUsed is the image's last use: its stamp, else its build time, else
// the layout's modification time.
func lastUsed(layout string) time.Time {
	if st, err := os.Stat(filepath.Join(layout, UsedFile)); err == nil {
		return st.ModTime()
	}
	if rec, err := ReadRecord(layout); err == nil && !rec.Built.IsZero() {
		return rec.Built
	}
	if st, err := os.Stat(layout); err == nil {
		return st.ModTime()
	}
	return time.Time{}
}

// treeBytes is what deleting dir frees: the size of the regular files under
// it that have no other link (a recipe image hard-links its base's layers),
// without following symbolic links.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); !ok || st.Nlink <= 1 {
					n += info.Size()
				}
			}
		}
		return nil
	})
	return n
}
