package gitroute

import (
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
)

// TestSelfWindow: a name the daemon changed suppresses its name events for
// selfWindow only, and only in that directory.
func TestSelfWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	w := &hostWatch{now: func() time.Time { return now }, selfAt: map[selfKey]time.Time{}}
	a, b := &fs.Inode{}, &fs.Inode{}
	w.self(a, "x")
	if !w.bySelf(a, "x") || w.bySelf(b, "x") || w.bySelf(a, "y") {
		t.Fatalf("self marks: a/x %v b/x %v a/y %v", w.bySelf(a, "x"), w.bySelf(b, "x"), w.bySelf(a, "y"))
	}
	now = now.Add(selfWindow + time.Millisecond)
	if w.bySelf(a, "x") {
		t.Errorf("self mark outlived the window")
	}
	var nilWatch *hostWatch
	nilWatch.self(a, "x") // no watch: a no-op
	if !nilWatch.short() {
		t.Errorf("no watch must mean short lifetimes")
	}
}
