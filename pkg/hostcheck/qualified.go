package hostcheck

import (
	_ "embed"
	"strings"
)

// qualifiedKernels is the repository-registered list of exactly qualified
// kernel builds: one per line, tab-separated `release`, `version` (uname -v)
// and `machine`, then the qualification record (date and where the suite's
// output is kept). Lines starting with # are comments.
//
//go:embed qualified-kernels.txt
var qualifiedKernels string

// Qualified reports whether u is exactly a registered build.
func Qualified(u Uname) bool {
	for _, line := range strings.Split(qualifiedKernels, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) >= 3 && f[0] == u.Release && f[1] == u.Version && f[2] == u.Machine {
			return true
		}
	}
	return false
}

// QualifiedLine is the line `make qualify-kernel` prints for u.
func QualifiedLine(u Uname, record string) string {
	return strings.Join([]string{u.Release, u.Version, u.Machine, record}, "\t")
}
