package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// DenialVersion is the version of a denial log line; a newer one is
// refused by ReadDenials.
const DenialVersion = 1

// Denial log bounds: when the file grows beyond MaxDenialLogBytes the
// proxy rewrites it with the newest KeepDenials entries (fewer if those
// alone would fill three quarters of the bound, so a rewrite is never
// followed at once by another).
const (
	MaxDenialLogBytes = 256 << 10
	KeepDenials       = 1000
)

// Decision words of a denial.
const (
	DecisionDenied         = "denied"          // outside the allowlist, or an address the policy refuses
	DecisionAskedDenied    = "asked-denied"    // the developer (or the ask's timeout) denied it
	DecisionNonInteractive = "non-interactive" // would have been asked, but no session label came with it
)

// Denial is one refused request, one JSON object per line of the Domain's
// network-denials.log.
type Denial struct {
	V        int       `json:"v"`
	Time     time.Time `json:"time"`
	Session  string    `json:"session"`
	Host     string    `json:"host"`
	Port     uint16    `json:"port"`
	Addr     string    `json:"addr,omitempty"` // the refused address, when the host was resolved (or is one)
	Via      string    `json:"via"`            // "connect", "http" or "socks"
	Reason   string    `json:"reason"`
	Decision string    `json:"decision"`
}

// DenialLog appends denials to a file, keeping it bounded.
type DenialLog struct {
	mu     sync.Mutex
	f      *os.File
	now    func() time.Time
	size   int64
	recent [][]byte // newest last, at most KeepDenials lines (each with its newline)
}

// NewDenialLog writes denials to f (opened O_APPEND by the Runtime
// Supervisor; O_RDWR lets the log keep the entries of earlier generations
// when it rewrites the file, and cut off a torn last line an earlier
// writer left, so the next entry starts on its own line).
func NewDenialLog(f *os.File, now func() time.Time) (*DenialLog, error) {
	if now == nil {
		now = time.Now
	}
	l := &DenialLog{f: f, now: now}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("denial log: %w", err)
	}
	l.size = st.Size()
	if l.size == 0 {
		return l, nil
	}
	old, err := io.ReadAll(io.NewSectionReader(f, 0, l.size))
	if err != nil {
		// Write-only: the entries already there are kept until the first
		// rewrite, which keeps only this log's own.
		return l, nil
	}
	if old[len(old)-1] != '\n' {
		// Cut the torn line off, so the file stays all whole entries.
		old = old[:bytes.LastIndexByte(old, '\n')+1]
		if err := f.Truncate(int64(len(old))); err != nil {
			return nil, fmt.Errorf("denial log: cut a torn last line: %w", err)
		}
		l.size = int64(len(old))
	}
	for _, line := range bytes.SplitAfter(old, []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			l.remember(line)
		}
	}
	return l, nil
}

func (l *DenialLog) remember(line []byte) {
	l.recent = append(l.recent, line)
	if len(l.recent) > KeepDenials {
		l.recent = append([][]byte(nil), l.recent[len(l.recent)-KeepDenials:]...)
	}
}

// Record appends d (its version and, if zero, its time filled in) and
// rewrites the file when it has grown beyond MaxDenialLogBytes.
func (l *DenialLog) Record(d Denial) error {
	if l == nil {
		return nil
	}
	d.V = DenialVersion
	if d.Time.IsZero() {
		d.Time = l.now()
	}
	d.Time = d.Time.UTC()
	line, err := json.Marshal(d)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("denial log: %w", err)
	}
	l.size += int64(len(line))
	l.remember(line)
	if l.size <= MaxDenialLogBytes {
		return nil
	}
	keep := l.recent
	total := 0
	for i := len(keep) - 1; i >= 0; i-- {
		if total+len(keep[i]) > MaxDenialLogBytes*3/4 {
			keep = keep[i+1:]
			break
		}
		total += len(keep[i])
	}
	l.recent = append([][]byte(nil), keep...)
	// With O_APPEND every write after the truncation lands at the new end,
	// offset 0 first.
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("denial log: truncate for the rewrite: %w", err)
	}
	buf := bytes.Join(l.recent, nil)
	if _, err := l.f.Write(buf); err != nil {
		return fmt.Errorf("denial log: rewrite: %w", err)
	}
	l.size = int64(len(buf))
	return nil
}

// ReadDenials reads a denial log, oldest first. A torn last line (a write
// cut short) is ignored; a line of a newer version is refused.
func ReadDenials(path string) ([]Denial, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseDenials(b, path)
}

// ParseDenials parses the contents of a denial log (name for messages).
func ParseDenials(b []byte, name string) ([]Denial, error) {
	var out []Denial
	lines := bytes.Split(b, []byte("\n"))
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		last := i == len(lines)-1 // no newline after it: possibly torn
		var d Denial
		if err := json.Unmarshal(line, &d); err != nil || d.V < 1 {
			if last {
				break
			}
			return nil, errdefs.New(errdefs.ErrCorrupt, "%s line %d is not a denial entry (%v); the file is only a record: remove it to start afresh", name, i+1, err)
		}
		if d.V > DenialVersion {
			return nil, errdefs.New(errdefs.ErrRefused, "%s line %d has version %d, newer than this Lazaret reads (%d): use matching Lazaret binaries", name, i+1, d.V, DenialVersion)
		}
		out = append(out, d)
	}
	return out, nil
}
