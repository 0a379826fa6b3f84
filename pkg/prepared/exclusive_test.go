package prepared

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// TestLockAll: a usage hold (a running Domain) or a live preparation
// refuses; otherwise every artifact is locked exclusively until Release,
// so a Runtime Supervisor's usage hold waits.
func TestLockAll(t *testing.T) {
	sr := t.TempDir()
	if x, err := LockAll(sr); err != nil || len(x.Artifacts) != 0 {
		t.Fatalf("no prepared/: %+v %v", x, err)
	}
	id := "pl-" + "0123456789abcdef0123456789abcdef"
	for _, d := range []string{preparedDir + "/" + id + "/rootfs", preparedDir + "/" + locksDir, preparedDir + "/foreign"} {
		os.MkdirAll(filepath.Join(sr, d), 0o755)
	}
	lockFile := filepath.Join(sr, preparedDir, locksDir, id)
	os.WriteFile(lockFile, nil, 0o600)

	use, err := os.Open(filepath.Join(sr, preparedDir, id))
	if err != nil {
		t.Fatal(err)
	}
	defer use.Close()
	unix.Flock(int(use.Fd()), unix.LOCK_SH)
	if _, err := LockAll(sr); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("artifact in use: %v", err)
	}
	unix.Flock(int(use.Fd()), unix.LOCK_UN)

	prep, err := os.OpenFile(lockFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Close()
	unix.Flock(int(prep.Fd()), unix.LOCK_EX)
	if _, err := LockAll(sr); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("preparation in progress: %v", err)
	}
	unix.Flock(int(prep.Fd()), unix.LOCK_UN)

	x, err := LockAll(sr)
	if err != nil || len(x.Artifacts) != 1 || x.Artifacts[0] != id {
		t.Fatalf("lock all: %+v %v", x, err)
	}
	if err := unix.Flock(int(use.Fd()), unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("usage hold while excluded: %v", err)
	}
	x.Release()
	if err := unix.Flock(int(use.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("usage hold after release: %v", err)
	}
	var none *Exclusion
	none.Release()
}
