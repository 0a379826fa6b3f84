package rs

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// Bounds of chownTree's walk: at most maxTreeWalkers directories are read
// at once, and at most treeWalkQueue opened directories wait for a walker
// (a walker that finds the queue full descends itself), so the open
// descriptors stay bounded whatever the tree's width.
const (
	maxTreeWalkers = 8
	treeWalkQueue  = 256
)

// chownTree changes the owner of every entry beneath the directory dirfd
// (not dirfd itself) to what to returns for it, when it returns ok, never
// following a symlink or leaving dirfd's file system, and returns how many
// it changed. -1 leaves an id. Directories are read by up to
// maxTreeWalkers goroutines (GOMAXPROCS): the walk is one lstat per entry,
// all of it kernel time, and a dependency directory holds 10^5 entries or
// more, so it is the give-back's and the session user's share of a start
// and a teardown. Entries are changed in no particular order; the first
// error stops the walk and is returned (what was changed stays changed:
// every caller repeats the walk until it succeeds).
func chownTree(dirfd int, to func(*unix.Stat_t) (uid, gid int, ok bool)) (int, error) {
	w := &treeWalk{to: to, queue: make(chan treeDir, treeWalkQueue)}
	workers := min(runtime.GOMAXPROCS(0), maxTreeWalkers)
	var done sync.WaitGroup
	for range workers - 1 {
		done.Go(func() {
			for d := range w.queue {
				w.dir(d)
				w.pending.Done()
			}
		})
	}
	w.dir(treeDir{fd: dirfd, borrowed: true})
	// Queued directories are walked by the others, or here when this is
	// the only walker.
	go func() {
		w.pending.Wait()
		close(w.queue)
	}()
	for d := range w.queue {
		w.dir(d)
		w.pending.Done()
	}
	done.Wait()
	if err := w.err.Load(); err != nil {
		return int(w.changed.Load()), *err
	}
	return int(w.changed.Load()), nil
}

// treeWalk is one chownTree walk.
type treeWalk struct {
	to      func(*unix.Stat_t) (uid, gid int, ok bool)
	queue   chan treeDir
	pending sync.WaitGroup // queued directories not yet walked
	changed atomic.Int64
	err     atomic.Pointer[error]
}

// treeDir is an open directory to walk, depth levels beneath the root;
// borrowed: the caller's, not closed here.
type treeDir struct {
	fd       int
	depth    int
	borrowed bool
}

func (w *treeWalk) fail(err error) {
	w.err.CompareAndSwap(nil, &err)
}

// dir walks d: queues (or, with the queue full, walks now) each
// subdirectory, then changes each entry's owner; it closes d unless
// borrowed.
func (w *treeWalk) dir(d treeDir) {
	if !d.borrowed {
		defer unix.Close(d.fd)
	}
	if w.err.Load() != nil {
		return
	}
	if d.depth > statetree.MaxDepth {
		w.fail(errdefs.New(errdefs.ErrRefused, "directory nesting deeper than %d", statetree.MaxDepth))
		return
	}
	names, err := statetree.ReadNames(d.fd)
	if err != nil {
		w.fail(err)
		return
	}
	for _, name := range names {
		if w.err.Load() != nil {
			return
		}
		var st unix.Stat_t
		if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			w.fail(&os.PathError{Op: "lstat", Path: name, Err: err})
			return
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			cfd, err := statetree.OpenBeneath(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			if err != nil {
				w.fail(err)
				return
			}
			sub := treeDir{fd: cfd, depth: d.depth + 1}
			w.pending.Add(1)
			select {
			case w.queue <- sub:
			default:
				w.dir(sub)
				w.pending.Done()
			}
		}
		uid, gid, ok := w.to(&st)
		if !ok {
			continue
		}
		if err := unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			w.fail(&os.PathError{Op: "lchown", Path: name, Err: err})
			return
		}
		w.changed.Add(1)
	}
}
