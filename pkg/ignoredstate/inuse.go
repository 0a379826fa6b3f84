package ignoredstate

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// InUse lists the Git-routing mounts, in any mount namespace whose process
// this caller can read, at the Domain's routed-workspace mount point (the
// daemon serving the state is mounted there). Like anchor.InUse it reads
// what the kernel reports now, independently of any process's liveness.
func InUse(routedWorkspace string) ([]string, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/mountinfo")
	if err != nil {
		return nil, err
	}
	return inUseIn(routedWorkspace, procs), nil
}

func inUseIn(mountpoint string, procs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range procs {
		f, err := os.Open(p)
		if err != nil {
			continue // gone, or not ours to read
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 4 && fs[4] == mountpoint && !seen[fs[0]] {
				seen[fs[0]] = true
				out = append(out, "process "+filepath.Base(filepath.Dir(p))+": Git-routing mount at "+fs[4])
			}
		}
		f.Close()
	}
	return out
}
