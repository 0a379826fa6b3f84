package anchor

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// InUse lists the mounts, in any mount namespace whose process this caller
// can read, that use the Domain Root's State Anchors (an overlay whose
// upperdir or workdir lies beneath <DomainRoot>/anchors). It does not rely on
// any process being alive or dead: it reads what the kernel reports now.
// Combined with the Domain lock (no Host Coordinator, no Runtime Supervisor)
// an empty result is the "no mount uses the state" evidence of §3.8.
func InUse(domainRoot string) ([]string, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/mountinfo")
	if err != nil {
		return nil, err
	}
	return inUseIn(domainRoot, procs), nil
}

func inUseIn(domainRoot string, procs []string) []string {
	needle := filepath.Join(domainRoot, Dir) + "/"
	seen := map[string]bool{}
	var out []string
	for _, p := range procs {
		f, err := os.Open(p)
		if err != nil {
			continue // the process is gone, or not ours to read
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "upperdir="+needle) && !strings.Contains(line, "workdir="+needle) {
				continue
			}
			pid := filepath.Base(filepath.Dir(p))
			if f := strings.Fields(line); len(f) > 4 && !seen[f[0]] {
				seen[f[0]] = true
				out = append(out, "process "+pid+": overlay at "+f[4])
			}
		}
		f.Close()
	}
	return out
}
