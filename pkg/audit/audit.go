// Package audit is the per-Domain host escalation audit log (beyond the
// spec): one JSON object per line in <Domain Root>/audit.jsonl,
// appended by the Host Coordinator and fsynced before each event's
// consequence (an execution, a delivered result, a prompt), read by
// `lazaret audit`. Every request, decision (who decided: session, Client
// CLI, rule), execution and result is recorded. Format version 1; a line
// with a newer version is refused by the reader.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/termtext"
)

// Version is the format version of Entry.
const Version = 1

// FileName is the audit log's name in the Domain Root.
const FileName = "audit.jsonl"

// Event names.
const (
	EventRequest  = "request"  // a verified request was received
	EventRefused  = "refused"  // an entry or request was refused before it was verified or admitted
	EventDecision = "decision" // approved (by the developer or a rule) or denied
	EventExecute  = "execute"  // the host process started
	EventResult   = "result"   // the one terminal result
	// EventNetworkDecision: a network ask of the allowlist mode (Argv
	// holds HOST:PORT) was approved (Reason: its scope) or denied.
	EventNetworkDecision = "network_decision"
)

// Entry is one audit line.
type Entry struct {
	V          int       `json:"v"`
	Time       time.Time `json:"time"`
	Event      string    `json:"event"`
	Generation uint64    `json:"generation,omitempty"`
	RequestID  string    `json:"request_id,omitempty"`
	SessionID  string    `json:"session_id,omitempty"`
	ClientID   string    `json:"client_cli_id,omitempty"`
	Profile    string    `json:"profile,omitempty"`
	Argv       []string  `json:"argv,omitempty"`
	Cwd        string    `json:"cwd,omitempty"`
	Why        string    `json:"justification,omitempty"`
	// Decision: "approve" or "deny"; DecidedBy: "developer", "auto-rule",
	// "no-terminal", "timeout".
	Decision  string   `json:"decision,omitempty"`
	DecidedBy string   `json:"decided_by,omitempty"`
	Rule      []string `json:"rule,omitempty"`
	// RuleSpec is the whole auto-approve rule (kind, argv, cwd constraint).
	RuleSpec string `json:"rule_spec,omitempty"`
	// Execution: the host process's pidfs identity.
	Process string `json:"process,omitempty"`
	// Result.
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Bytes    uint64 `json:"output_bytes,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Log appends entries to one audit file.
type Log struct {
	mu  sync.Mutex
	f   *os.File
	now func() time.Time
}

// Open opens (creating, 0600) the audit log in domainRoot.
func Open(domainRoot string, now func() time.Time) (*Log, error) {
	f, err := os.OpenFile(filepath.Join(domainRoot, FileName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	return &Log{f: f, now: now}, nil
}

// Append writes e as one line and fsyncs it (and so every line written
// before it).
func (l *Log) Append(e Entry) error { return l.append(e, true) }

// AppendBuffered writes e as one line without fsyncing: the next Append or
// Sync makes it durable. The coordinator uses it only for an entry whose
// consequence is itself preceded by a synced entry (a request and an
// auto-rule decision are synced by the execution's entry before the host
// process is released, or by the result's entry before the result is
// delivered).
func (l *Log) AppendBuffered(e Entry) error { return l.append(e, false) }

// Sync makes every line written so far durable.
func (l *Log) Sync() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Sync()
}

func (l *Log) append(e Entry, sync bool) error {
	if l == nil {
		return nil
	}
	e.V = Version
	if e.Time.IsZero() {
		e.Time = l.now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("append to audit log: %w", err)
	}
	if !sync {
		return nil
	}
	return l.f.Sync()
}

// Close closes the log.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// Read returns the entries of r at or after since (zero: all). A torn last
// line (a crash mid-append) is skipped; a newer version is refused.
func Read(r io.Reader, since time.Time) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // torn or foreign line
		}
		if e.V > Version {
			return nil, errdefs.New(errdefs.ErrRefused, "audit line %d has format version %d; this lazaret reads up to %d: use a newer lazaret", line, e.V, Version)
		}
		if !since.IsZero() && e.Time.Before(since) {
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Format renders e as one human-readable line.
func Format(e Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-8s", e.Time.Local().Format("2006-01-02 15:04:05"), e.Event)
	if e.RequestID != "" {
		fmt.Fprintf(&b, " req=%.8s", e.RequestID)
	}
	if e.SessionID != "" {
		fmt.Fprintf(&b, " session=%.8s", e.SessionID)
	}
	if e.Decision != "" {
		fmt.Fprintf(&b, " %s by %s", e.Decision, e.DecidedBy)
	}
	if e.Outcome != "" {
		fmt.Fprintf(&b, " %s", e.Outcome)
		if e.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d", *e.ExitCode)
		}
		if e.Signal != 0 {
			fmt.Fprintf(&b, " signal=%d", e.Signal)
		}
	}
	switch {
	case e.Event == EventNetworkDecision && len(e.Argv) == 1:
		fmt.Fprintf(&b, " host=%q", e.Argv[0])
	case len(e.Argv) > 0:
		q, _ := json.Marshal(e.Argv)
		fmt.Fprintf(&b, " argv=%s", q)
	}
	if e.Cwd != "" {
		fmt.Fprintf(&b, " cwd=%q", e.Cwd)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	// A justification, a reason or an argv element is the sandbox's text.
	return termtext.Line(b.String())
}
