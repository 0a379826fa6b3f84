package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/domain"
)

// TestDX5FullStorageRoot (DX-5, FR-7): a sandbox that fills the Storage
// Root's filesystem (a 48 MiB tmpfs here, as a developer's disk an agent's
// download filled) ends its session normally, and its coordinator does not
// wedge — pebble retries a flush that failed for ever, which kept the
// Domain lock held and a CPU spinning, and the next `lazaret run` waited
// out its three minutes. The next run is refused at once, saying how full
// the filesystem is and what frees it; `lazaret state reset` frees the
// space at once (it used to leave the discarded state to the next start,
// which the full filesystem prevents); the run after that recovers the
// Domain, and nothing is left.
func TestDX5FullStorageRoot(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	state := filepath.Join(os.TempDir(), "lazaret-full-"+randHex(4))
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, fmt.Sprintf("size=48m,mode=0700,uid=%d,gid=%d", e.uid, e.gid)); err != nil {
		t.Fatalf("mount a 48 MiB tmpfs for the Storage Root (the harness runs as root): %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(state, unix.MNT_DETACH)
		}
		os.Remove(state)
	})
	env := []string{"XDG_STATE_HOME=" + state}
	run := func(limit time.Duration, args ...string) result { return lzFor(t, limit, ws, env, nil, args...) }
	free := func() uint64 {
		var st unix.Statfs_t
		if err := unix.Statfs(state, &st); err != nil {
			t.Fatal(err)
		}
		return st.Bavail * uint64(st.Bsize)
	}
	canon, _ := filepath.EvalSymlinks(ws)
	lockPath := filepath.Join(state, "lazaret", "domains", string(domain.DeriveID("tiny", canon)), "lifecycle.lock")
	// released waits until no coordinator holds the Domain lock.
	released := func(within time.Duration) bool {
		f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // closing it releases the lock lockWhenFree took
		return lockWhenFree(f, within) == nil
	}

	if r := run(3*time.Minute, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("a start on the roomy filesystem: %+v", r)
	}
	r := run(time.Minute, "run", "-p", "tiny", "--", "sh", "-c", "dd if=/dev/zero of=/root/fill bs=1M count=100 2>/dev/null; echo filled")
	if r.code != 0 || r.stdout != "filled\n" {
		t.Fatalf("the filling session: %+v", r)
	}
	if f := free(); f > 1<<20 {
		t.Fatalf("the sandbox left %d bytes free: the scenario needs a full filesystem", f)
	}
	if !released(20 * time.Second) {
		t.Fatal("the coordinator still holds the Domain lock 20 s after its last session: wedged on the full filesystem")
	}

	began := time.Now()
	r = run(30*time.Second, "run", "-p", "tiny", "--", "true")
	if r.code == 0 || time.Since(began) > 10*time.Second {
		t.Fatalf("a start on the full filesystem (%s): %+v", time.Since(began), r)
	}
	for _, want := range []string{"the Storage Root " + state + "/lazaret is on a filesystem with", "free, under the 32 MiB a Domain needs to start or join", "lazaret state reset -p PROFILE PATH", "lazaret ls", "XDG_STATE_HOME"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, r.stderr)
		}
	}
	// A Domain the full filesystem left crashed says what keeps its
	// recovery from running.
	if r := run(time.Minute, "status", "-C", ws); strings.Contains(r.stdout, "crashed") && !strings.Contains(r.stdout, "which is probably why") {
		t.Errorf("status of the crashed Domain on the full filesystem:\n%s", r.stdout)
	}

	if r := run(time.Minute, "state", "reset", "-p", "tiny", "/root", "--yes"); r.code != 0 {
		t.Fatalf("state reset /root: %+v", r)
	}
	if f := free(); f < 40<<20 {
		t.Fatalf("state reset freed nothing at once: %d bytes free", f)
	}
	if r := run(3*time.Minute, "run", "-p", "tiny", "--", "sh", "-c", "test ! -e /root/fill && echo recovered"); r.code != 0 || r.stdout != "recovered\n" {
		t.Fatalf("the run after freeing space: %+v", r)
	}
	if !released(20 * time.Second) {
		t.Fatal("the last coordinator did not finish its teardown")
	}
	if err := unix.Unmount(state, 0); err != nil {
		t.Fatalf("unmount the Storage Root's tmpfs: %v", err)
	}
	mounted = false
	noLeftovers(t)
}
