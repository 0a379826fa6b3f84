package termtext

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":                   "plain text",
		"two\nlines\tand a tab":        "two\nlines\tand a tab",
		"naïve — ünïcödé ✓ 日本":         "naïve — ünïcödé ✓ 日本",
		"\x1b]0;PWNED\x07x":            `\x1b]0;PWNED\ax`,
		"n\x1b[2Jame":                  `n\x1b[2Jame`,
		"over\rwrite":                  `over\rwrite`,
		"del\x7f":                      `del\x7f`,
		"c1 \u009b31m":                 `c1 \u009b31m`,
		"bidi \u202eexe.txt":           `bidi \u202eexe.txt`,
		"bad \xff\xfe utf-8":           `bad \xff\xfe utf-8`,
		"osc52 \x1b]52;c;ZXZpbA==\x07": `osc52 \x1b]52;c;ZXZpbA==\a`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if got := Escape(in); strings.ContainsAny(got, "\x1b\x07\r\x7f\u009b\u202e") {
			t.Errorf("Escape(%q) kept a control character: %q", in, got)
		}
	}
	if !Safe("ok ✓\n") || Safe("\x1b") || Safe("\xff") {
		t.Errorf("Safe")
	}
	// On one line, a newline or a tab cannot start a line or a column.
	for in, want := range map[string]string{
		"a file.txt":                 "a file.txt",
		"forged\n04:00 INFO hc done": `forged\n04:00 INFO hc done`,
		"col\tumn\x1b[1m":            `col\tumn\x1b[1m`,
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriter: a stream is escaped like Escape, also when a rune or an
// escape sequence is split across writes.
func TestWriter(t *testing.T) {
	in := "héllo \x1b[31mred\x1b[0m ✓ 日本\r\n\u009b end"
	want := Escape(in)
	for split := 0; split <= len(in); split++ {
		var out bytes.Buffer
		w := NewWriter(&out)
		for _, part := range []string{in[:split], in[split:]} {
			if n, err := w.Write([]byte(part)); err != nil || n != len(part) {
				t.Fatalf("Write: %d, %v", n, err)
			}
		}
		w.Flush()
		if out.String() != want {
			t.Errorf("split at %d: %q, want %q", split, out.String(), want)
		}
	}
	// A rune cut off at the end is escaped byte by byte on Flush.
	var out bytes.Buffer
	w := NewWriter(&out)
	w.Write([]byte("x\xe6\x97"))
	if out.String() != "x" {
		t.Errorf("before Flush: %q", out.String())
	}
	w.Flush()
	if out.String() != `x\xe6\x97` {
		t.Errorf("after Flush: %q", out.String())
	}
}
