// Package hclog is the Domain log (hc.log in the Domain Root): how it is
// opened for a new coordinator (appended, rotated once it is large), the
// marker line that starts every coordinator process's part of it, and
// reading it back as records grouped by generation for `lazaret logs`.
//
// The Host Coordinator, the Runtime Supervisor and the helpers they start
// write slog text lines (time=… level=… msg=… role=… key=value); runsc and
// slirp4netns may add plain lines. Each coordinator process first writes
// StartMarker; its generation is the first generation=N (N > 0) after it.
package hclog

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/termtext"
)

// StartMarker is the message of the first line every coordinator process
// writes.
const StartMarker = "host coordinator process started"

// MaxBytes is the size above which the log is rotated (to Previous) when
// the next coordinator starts: the current and at least the last
// generation stay readable, in at most about twice this.
const MaxBytes = 4 << 20

// Previous is the rotated log's name beside the log: path + ".1".
func Previous(path string) string { return path + ".1" }

// OpenForStart opens the log for a starting coordinator: append-only,
// 0600, after moving a log larger than MaxBytes to Previous (replacing an
// older one).
func OpenForStart(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxBytes {
		if err := os.Rename(path, Previous(path)); err != nil {
			return nil, fmt.Errorf("rotate the Domain log: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the Domain log: %w", err)
	}
	return f, nil
}

// Record is one log line.
type Record struct {
	Time  time.Time `json:"time,omitzero"`
	Level string    `json:"level,omitempty"` // DEBUG INFO WARN ERROR; "" for a plain line
	Role  string    `json:"role,omitempty"`  // hc, rs, git_routing, …
	Msg   string    `json:"msg"`
	// Attrs are the line's other keys in order, without time, level, msg,
	// role and the ones every line of the part has (pid, domain_id,
	// generation).
	Attrs []Attr `json:"attrs,omitempty"`
	// Plain: not a structured line (runsc, slirp4netns, a panic): Msg is
	// the line as written.
	Plain bool `json:"plain,omitempty"`
	// Internal: a message of the Domain Store's or Storage Catalog's
	// storage engine (shown only with debug).
	Internal bool `json:"internal,omitempty"`
}

// Attr is one key=value of a record.
type Attr struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Part is what one coordinator process wrote.
type Part struct {
	// Generation is the Domain generation of the part (0 when the
	// coordinator failed before it began one, or the part precedes the
	// first marker).
	Generation uint64 `json:"generation"`
	// CoordinatorPID is the coordinator's pid (0 when unknown).
	CoordinatorPID int      `json:"coordinator_pid,omitempty"`
	Records        []Record `json:"records"`
}

// omitted are the keys a rendered record leaves out: its own fields and
// those the part's header shows.
var omitted = map[string]bool{"time": true, "level": true, "msg": true, "role": true, "pid": true, "domain_id": true, "generation": true}

// internalComponents are the components whose messages are the storage
// engine's own (pebble's WAL replay and the like).
var internalComponents = map[string]bool{"domain-store": true, "storage-catalog": true}

// ParseLine parses one line.
func ParseLine(line string) Record {
	kv, ok := parseLogfmt(line)
	if !ok {
		return Record{Msg: line, Plain: true}
	}
	r := Record{}
	for _, a := range kv {
		switch a.Key {
		case "time":
			r.Time, _ = time.Parse(time.RFC3339Nano, a.Value)
		case "level":
			r.Level = a.Value
		case "msg":
			r.Msg = a.Value
		case "role":
			if r.Role == "" {
				r.Role = a.Value
			}
		case "component":
			if internalComponents[a.Value] {
				r.Internal = true
			}
			r.Attrs = append(r.Attrs, a)
		default:
			if !omitted[a.Key] {
				r.Attrs = append(r.Attrs, a)
			}
		}
	}
	return r
}

// parseLogfmt splits a slog text line into its pairs; false unless it
// starts with time= and has a level.
func parseLogfmt(line string) ([]Attr, bool) {
	if !strings.HasPrefix(line, "time=") {
		return nil, false
	}
	var out []Attr
	hasLevel := false
	s := line
	for len(s) > 0 {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		eq := strings.IndexByte(s, '=')
		sp := strings.IndexByte(s, ' ')
		if eq <= 0 || (sp >= 0 && sp < eq) {
			return nil, false
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			// A Go-quoted string (slog quotes with strconv.Quote).
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, false
			}
			val, _ = strconv.Unquote(q)
			s = s[len(q):]
		} else if sp := strings.IndexByte(s, ' '); sp >= 0 {
			val, s = s[:sp], s[sp:]
		} else {
			val, s = s, ""
		}
		if key == "level" {
			hasLevel = true
		}
		out = append(out, Attr{key, val})
	}
	return out, hasLevel
}

// AddLine adds one line to parts: a StartMarker line begins a new part.
func AddLine(parts []Part, line string) []Part {
	if line == "" {
		return parts
	}
	kv, structured := parseLogfmt(line)
	rec := ParseLine(line)
	if structured && rec.Msg == StartMarker && rec.Role == "hc" {
		p := Part{}
		for _, a := range kv {
			if a.Key == "pid" {
				p.CoordinatorPID, _ = strconv.Atoi(a.Value)
			}
		}
		parts = append(parts, p)
	} else if len(parts) == 0 {
		parts = append(parts, Part{})
	}
	last := &parts[len(parts)-1]
	if last.Generation == 0 && structured {
		for _, a := range kv {
			if a.Key == "generation" {
				if g, err := strconv.ParseUint(a.Value, 10, 64); err == nil && g > 0 {
					last.Generation = g
				}
			}
		}
	}
	last.Records = append(last.Records, rec)
	return parts
}

// Visible reports whether a record is shown at the given verbosity: debug
// shows everything; otherwise debug-level lines and the storage engine's
// internal messages are left out.
func Visible(r Record, debug bool) bool {
	if debug {
		return true
	}
	return r.Level != "DEBUG" && !r.Internal
}

// Format renders a record as one human-readable line: local time, level,
// role, message, then key=value.
func Format(r Record) string {
	if r.Plain {
		return fmt.Sprintf("%-12s %-5s %-11s %s", "", "", "", termtext.Line(r.Msg))
	}
	var b strings.Builder
	ts := ""
	if !r.Time.IsZero() {
		ts = r.Time.Local().Format("15:04:05.000")
	}
	fmt.Fprintf(&b, "%-12s %-5s %-11s %s", ts, r.Level, r.Role, termtext.Line(r.Msg))
	for _, a := range r.Attrs {
		// Values can name what the sandbox made: quoted (control
		// characters escaped) as slog writes them.
		v := a.Value
		if v == "" || strings.ContainsAny(v, " \t\"=") || termtext.Line(v) != v {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
	}
	return b.String()
}
