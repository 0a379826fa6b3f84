package gitroute

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hanwen/go-fuse/v2/fs"
)

// TestSelfWindow: the outcome of a name change the daemon made is
// remembered for selfWindow only, and only in that directory.
func TestSelfWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	w := &hostWatch{now: func() time.Time { return now }, selfAt: map[selfKey]selfRec{}}
	a, b := &fs.Inode{}, &fs.Inode{}
	w.self(a, "x", 42)
	if ino, ok := w.bySelf(a, "x"); !ok || ino != 42 {
		t.Fatalf("a/x: %d %v, want 42 true", ino, ok)
	}
	if _, ok := w.bySelf(b, "x"); ok {
		t.Errorf("b/x remembered")
	}
	if _, ok := w.bySelf(a, "y"); ok {
		t.Errorf("a/y remembered")
	}
	w.self(a, "x", unknownIno) // a new change in progress
	if ino, _ := w.bySelf(a, "x"); ino != unknownIno {
		t.Errorf("a/x after a new change: %d", ino)
	}
	now = now.Add(selfWindow + time.Millisecond)
	if _, ok := w.bySelf(a, "x"); ok {
		t.Errorf("self record outlived the window")
	}
	var nilWatch *hostWatch
	nilWatch.self(a, "x", 1) // no watch: a no-op
	if !nilWatch.short() {
		t.Errorf("no watch must mean short lifetimes")
	}
}

// TestEndWatchesRemovesEveryWatch: endWatches removes the kernel's watches
// (a change in a watched directory then reports nothing, only the
// removals' IN_IGNORED) and no watch is added afterwards.
func TestEndWatchesRemovesEveryWatch(t *testing.T) {
	w, err := newHostWatch(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	watch := func(dir string) {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		w.add(nil, fd, st.Ino)
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, d := range dirs {
		watch(d)
	}
	if len(w.byWD) != 2 {
		t.Fatalf("%d watches, want 2", len(w.byWD))
	}
	w.endWatches()
	watch(t.TempDir())
	if len(w.byWD) != 0 || len(w.byIno) != 0 {
		t.Fatalf("after endWatches: %d watches, %d inodes recorded; want none", len(w.byWD), len(w.byIno))
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.SetNonblock(w.fd, true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n, err := unix.Read(w.fd, buf)
	if err != nil && err != unix.EAGAIN {
		t.Fatal(err)
	}
	ignored := 0
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		if ev.Mask&unix.IN_IGNORED == 0 {
			t.Errorf("an event (mask %#x) after endWatches", ev.Mask)
		}
		ignored++
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	if ignored != 2 {
		t.Errorf("%d IN_IGNORED events, want one per removed watch (2)", ignored)
	}
}
