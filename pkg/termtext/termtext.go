// Package termtext keeps text that Lazaret prints from acting on the
// developer's terminal. Much of what Lazaret shows comes from the sandbox
// or names it made — file names in State Anchors and Ignored Workspace
// State, paths in the Domain's log, a recipe step's output, messages
// naming sticky paths — and a control character there (ESC starting an
// escape sequence, a carriage return overwriting a line, a C1 control, a
// bidirectional override reordering what is read) would let the agent
// clear the screen, retitle the window, write the clipboard (OSC 52) or
// forge lines of Lazaret's own output.
//
// Escape renders such a rune as a Go escape (\x1b, \r, \u202e) and every
// other rune as it is; newline and tab stay. Line escapes those too, for
// text shown on one line; the CLI's text formats use it for what the
// sandbox named. Writer escapes a stream as Escape does, for the CLI's
// output when it is a terminal. Output meant for programs (--json) is
// left exact.
package termtext

import (
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Safe reports whether s prints as it is: valid UTF-8 of graphic runes,
// spaces, newlines and tabs only.
func Safe(s string) bool { return safe(s, true) }

// Escape returns s with every rune Safe would refuse written as a Go
// escape sequence; s itself when it is Safe.
func Escape(s string) string { return escape(s, true) }

// Line is Escape for text shown on one line (a file name, a logged value,
// a table cell): newlines and tabs are escaped too, so the text cannot
// forge a line or a column of its own.
func Line(s string) string { return escape(s, false) }

func safe(s string, layout bool) bool {
	for _, r := range s {
		if !keep(r, layout) {
			return false
		}
	}
	return true
}

func escape(s string, layout bool) string {
	if safe(s, layout) {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	return string(appendEscaped(b, []byte(s), layout))
}

// keep reports whether r is printed as it is (utf8.RuneError stands for
// an invalid byte, which is escaped); layout keeps newlines and tabs.
func keep(r rune, layout bool) bool {
	return layout && (r == '\n' || r == '\t') || r != utf8.RuneError && unicode.IsGraphic(r)
}

// appendEscaped appends p, escaped, to b. p holds whole runes (or invalid
// bytes, escaped one by one).
func appendEscaped(b, p []byte, layout bool) []byte {
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && n <= 1:
			b = append(b, `\x`...)
			b = append(b, "0123456789abcdef"[p[0]>>4], "0123456789abcdef"[p[0]&15])
		case keep(r, layout):
			b = append(b, p[:n]...)
		default:
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
			b = append(b, q[1:len(q)-1]...)
		}
		p = p[n:]
	}
	return b
}

// Writer escapes what is written through it as Escape does and writes the
// result to its destination. A rune split across two writes is held until
// it is whole (at most three bytes); Flush writes what is held.
type Writer struct {
	w    io.Writer
	part []byte
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports len(p) written when the
// destination took everything.
func (t *Writer) Write(p []byte) (int, error) {
	in := p
	if len(t.part) > 0 {
		in = append(t.part, p...)
		t.part = nil
	}
	// Hold an incomplete rune at the end for the next write.
	if k := incompleteTail(in); k > 0 {
		t.part = append([]byte(nil), in[len(in)-k:]...)
		in = in[:len(in)-k]
	}
	if _, err := t.w.Write(appendEscaped(make([]byte, 0, len(in)+16), in, true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held incomplete rune (escaped byte by byte).
func (t *Writer) Flush() error {
	if len(t.part) == 0 {
		return nil
	}
	b := appendEscaped(nil, t.part, true)
	t.part = nil
	_, err := t.w.Write(b)
	return err
}

// incompleteTail is the length of a UTF-8 sequence begun but not ended at
// the end of p (0 when p ends with a whole rune or an invalid byte).
func incompleteTail(p []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(p); k++ {
		c := p[len(p)-k]
		if c < 0x80 {
			return 0 // ASCII: complete
		}
		if c >= 0xC0 { // a leading byte: is its sequence cut short?
			if need := seqLen(c); need > k {
				return k
			}
			return 0
		}
	}
	return 0
}

// seqLen is the length of the UTF-8 sequence leading byte c begins.
func seqLen(c byte) int {
	switch {
	case c >= 0xF0:
		return 4
	case c >= 0xE0:
		return 3
	default:
		return 2
	}
}
