package hostcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// MinStartFree is the free space a Domain start or join needs on the
// Storage Root's filesystem: the Domain store's and the Storage Catalog's
// write-ahead logs and tables, the Domain log and the generation's records
// take a few MiB, and a coordinator that cannot write them must stop (its
// storage engine cannot flush). MinStartRuntimeFree is the same for the
// runtime root (sockets, bundle, resolver files; the guest binaries are
// hard links).
const (
	MinStartFree        = 32 << 20
	MinStartRuntimeFree = 4 << 20
)

// StatfsNearest statfs's path or, if it does not exist yet, its nearest
// existing ancestor (where it will be created).
func StatfsNearest(path string) (FS, error) {
	for p := path; ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return FS{Type: int64(st.Type), FreeBytes: st.Bavail * uint64(st.Bsize)}, nil
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return FS{}, &os.PathError{Op: "statfs", Path: p, Err: err}
		}
	}
}

// ReclaimAdvice is how a developer frees space Lazaret holds.
const ReclaimAdvice = "`lazaret ls` shows what each Domain holds; `lazaret state reset -p PROFILE PATH` discards a path's state, `lazaret rm --older-than 30d` old Domains, `lazaret gc` unused images"

// StartSpace refuses a start or join when the Storage Root's or the
// runtime root's filesystem has less free space than the Domain needs
// (MinStartFree, MinStartRuntimeFree); statfs is StatfsNearest in
// production. A filesystem it cannot inspect is left to the start (doctor
// names it).
func StartSpace(statfs func(string) (FS, error), storageRoot, runtimeRoot string) error {
	for _, c := range []struct {
		role, path, env string
		min             uint64
	}{{"Storage Root", storageRoot, "XDG_STATE_HOME", MinStartFree}, {"runtime root", runtimeRoot, "XDG_RUNTIME_DIR", MinStartRuntimeFree}} {
		fs, err := statfs(c.path)
		if err != nil || fs.FreeBytes >= c.min {
			continue
		}
		advice := "free space there, or set " + c.env + " to a roomier local filesystem"
		if c.role == "Storage Root" {
			advice = "free space there (" + ReclaimAdvice + "), or set " + c.env + " to a roomier local filesystem"
		}
		return errdefs.New(errdefs.ErrUnavailable, "the %s %s is on a filesystem with %s free, under the %s a Domain needs to start or join (its store, catalog and log): %s",
			c.role, c.path, humanBytes(fs.FreeBytes), humanBytes(c.min), advice)
	}
	return nil
}

// LowSpaceNote explains a coordinator's failure by the Storage Root's
// filesystem being (nearly) full, or is empty when it is not: a
// coordinator that cannot write its store stops, and its log, on the same
// filesystem, may have lost its last lines.
func LowSpaceNote(statfs func(string) (FS, error), storageRoot string) string {
	fs, err := statfs(storageRoot)
	if err != nil || fs.FreeBytes >= MinStartFree {
		return ""
	}
	return fmt.Sprintf("the Storage Root %s is on a filesystem with %s free, which is probably why (a coordinator that cannot write its records stops, and its log may have lost its last lines): free space there (%s) and run again",
		storageRoot, humanBytes(fs.FreeBytes), ReclaimAdvice)
}

// humanBytes renders n in binary units (912 KiB, 32 MiB).
func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
