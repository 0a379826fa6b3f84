package hostcheck

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// qualifiedKernels is the list of builds the project itself qualified,
// compiled into every binary: one per line, tab-separated `release`,
// `version` (uname -v) and `machine`, then the qualification record (date
// and where the suite's output is kept). Lines starting with # are
// comments. Every other build is qualified on the host that runs it, by a
// host qualification record (records.go).
//
//go:embed qualified-kernels.txt
var qualifiedKernels string

// embeddedSource is Qualification.Source for a build on the embedded list.
const embeddedSource = "the list built into Lazaret"

// Embedded reports whether u is exactly a build on the embedded list.
func Embedded(u Uname) bool {
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

// Qualification says how the running build is qualified.
type Qualification struct {
	Uname Uname
	// Source is embeddedSource or the matching record's path.
	Source string
	// Record is the matching host qualification record (nil for the
	// embedded list).
	Record *Record
	// Refusals are the records or directories refused while looking (also
	// when another source qualified the build).
	Refusals []error
}

// Describe is doctor's one-line account of q.
func (q Qualification) Describe() string {
	if q.Record == nil {
		return fmt.Sprintf("x86-64, Linux ≥ 6.9, build %s %s qualified by %s", q.Uname.Release, q.Uname.Version, q.Source)
	}
	return fmt.Sprintf("x86-64, Linux ≥ 6.9, build %s %s qualified by record %s (%s, Lazaret %s)", q.Uname.Release, q.Uname.Version, q.Source, q.Record.QualifiedAt.UTC().Format("2006-01-02"), q.Record.Lazaret)
}

// qualification finds u on the embedded list or in a host record, or
// returns the refusal naming the command that qualifies it.
func (h Host) qualification(u Uname) (Qualification, error) {
	q := Qualification{Uname: u}
	var set RecordSet
	if h.Records != nil {
		set = h.Records(h.SandboxWritable)
	}
	q.Refusals = set.Refusals
	if Embedded(u) {
		q.Source = embeddedSource
		return q, nil
	}
	var others []string
	for i, r := range set.Records {
		if r.Uname() == u {
			q.Source, q.Record = r.Path, &set.Records[i]
			return q, nil
		}
		others = append(others, fmt.Sprintf("%s is for build %s %s %s", r.Path, r.Release, r.Version, r.Machine))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kernel build %s %q (%s) is not qualified for pidfs process authority on this host: run `%s` once (as root it records the result for every user in %s; as yourself, for you only), then try again", u.Release, u.Version, u.Machine, QualifyCommand, SystemRecordPath)
	for _, o := range others {
		fmt.Fprintf(&b, "; not used: %s", o)
	}
	for _, e := range set.Refusals {
		fmt.Fprintf(&b, "; refused: %v", e)
	}
	return q, errdefs.New(errdefs.ErrUnsupportedHost, "%s", b.String())
}
