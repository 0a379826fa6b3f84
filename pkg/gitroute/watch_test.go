package gitroute

import (
	"testing"
	"time"

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
