package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Limits are a profile's configured resource limits (the `limits` table);
// a zero field is not configured and takes its default at Domain start
// (Effective). Only configured values are fingerprinted, so a profile that
// sets none keeps the fingerprint it had before limits existed, and a
// default that follows the host (half of its memory) never makes two
// machines' fingerprints of one profile differ.
type Limits struct {
	// Memory is the most memory, in bytes, the sandbox's application
	// memory (guest processes, tmpfs, the in-memory root overlay) may
	// commit on the host before the Runtime Supervisor kills the sandbox.
	Memory uint64 `json:"memory,omitempty"`
	// Processes is every guest process's RLIMIT_NPROC (soft and hard):
	// the sentry refuses a fork or clone beyond it for that guest uid.
	Processes uint64 `json:"processes,omitempty"`
	// OpenFiles is every guest process's RLIMIT_NOFILE (soft and hard).
	OpenFiles uint64 `json:"open_files,omitempty"`
}

// IsZero reports whether no limit is configured.
func (l Limits) IsZero() bool { return l == Limits{} }

// Bounds of the configurable limits.
const (
	// MinMemory leaves room for the guest init, a shell and the in-memory
	// root overlay of a fresh sandbox.
	MinMemory = 128 << 20
	// MinProcesses lets the guest init, a session and a few children run.
	MinProcesses = 16
	// MaxProcesses is gVisor's own task limit (kernel.TasksLimit): the
	// sentry creates no task beyond it whatever the rlimit says.
	MaxProcesses = 1 << 16
	// MinOpenFiles is below what a shell needs to be unusable.
	MinOpenFiles = 64
	// MaxOpenFiles is Linux's default fs.nr_open, the largest RLIMIT_NOFILE
	// the sentry accepts.
	MaxOpenFiles = 1 << 20
)

// Defaults of the limits a profile does not configure.
const (
	// DefaultProcesses counts tasks like Linux's RLIMIT_NPROC (threads
	// too): enough for a parallel build or a JVM with hundreds of threads,
	// small enough that a fork bomb stays a few thousand guest tasks
	// (measured: each guest process costs about 2.5 host threads of the
	// sandbox, so 4096 is about 10,000 host threads).
	DefaultProcesses = 4096
	// DefaultOpenFiles is per process: more than any build tool or editor
	// server opens, and no less than the sentry can back with host
	// descriptors of its own.
	DefaultOpenFiles = 65536
	// fallbackMemory is the memory limit when the host's total memory is
	// unknown.
	fallbackMemory = 4 << 30
)

// Effective returns the limits a Domain starts with: the configured
// values, and for the others the defaults. memTotal is the host's total
// memory in bytes (0 when unknown); the default memory limit is half of
// it, so a runaway sandbox leaves the host and other Domains the rest.
func (l Limits) Effective(memTotal uint64) Limits {
	if l.Memory == 0 {
		l.Memory = memTotal / 2
		if l.Memory < MinMemory {
			l.Memory = fallbackMemory
		}
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	return l
}

// sizeUnits are the accepted size suffixes (binary multiples only: "GB"
// would be ambiguous).
var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}

// ParseSize parses a byte size: a whole number with a binary unit, e.g.
// "512MiB", "8GiB", "1TiB", or "4096B".
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		n, err := strconv.ParseUint(num, 10, 64)
		if (err != nil || num == "") && u.shift == 0 {
			break // "8GB", "B": not a unit we accept
		}
		if err != nil || num == "" {
			return 0, fmt.Errorf("%q is not a whole number of %s: write e.g. \"512MiB\" or \"8GiB\"", s, u.suffix)
		}
		if n > math.MaxUint64>>u.shift {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return n << u.shift, nil
	}
	return 0, fmt.Errorf("%q has no unit: write a whole number with KiB, MiB, GiB or TiB (binary units; \"GB\" and \"G\" are not accepted), e.g. \"512MiB\" or \"8GiB\"", s)
}

// FormatSize renders a byte size with the largest binary unit that
// divides it ("8GiB", "1536MiB", "100B").
func FormatSize(n uint64) string {
	for _, u := range sizeUnits {
		if u.shift > 0 && n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}

// limitKeys are the keys of a `limits` table.
var limitKeys = []string{"memory", "processes", "open_files"}

// decodeLimits reads a `limits` table into l.
func (d *doc) decodeLimits(p pathKey, v any, l *layer, defaults bool) {
	t, ok := d.table(p, v)
	if !ok {
		return
	}
	for _, k := range d.keys(p, t) {
		kp := p.child(k)
		val := t[k]
		switch k {
		case "memory":
			s, ok := val.(string)
			if !ok {
				d.valueErrorf(kp, "must be a size string such as \"8GiB\" or \"512MiB\", not %v", val)
				continue
			}
			n, err := ParseSize(s)
			if err != nil {
				d.valueErrorf(kp, "%v", err)
				continue
			}
			if n < MinMemory {
				d.valueErrorf(kp, "%s is below the minimum of %s a sandbox needs to start: raise it", s, FormatSize(MinMemory))
				continue
			}
			l.memory = &entry[uint64]{n, kp, d.entryWhere(kp, defaults)}
		case "processes", "open_files":
			lo, hi := uint64(MinProcesses), uint64(MaxProcesses)
			what := "guest tasks (processes and threads) per guest user"
			if k == "open_files" {
				lo, hi, what = MinOpenFiles, MaxOpenFiles, "open files per guest process"
			}
			n, ok := val.(int64)
			if !ok || n < int64(lo) || uint64(n) > hi {
				d.valueErrorf(kp, "must be a whole number of %s from %d to %d, not %v", what, lo, hi, val)
				continue
			}
			e := &entry[uint64]{uint64(n), kp, d.entryWhere(kp, defaults)}
			if k == "processes" {
				l.processes = e
			} else {
				l.openFiles = e
			}
		default:
			d.unknown(p, k, limitKeys)
		}
	}
}
