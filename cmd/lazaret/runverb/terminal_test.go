package runverb

import "testing"

func TestEscapeFilter(t *testing.T) {
	type step struct {
		in   string
		out  string
		act  escapeAction
		rest string
	}
	for name, steps := range map[string][]step{
		"plain":                {{in: "ls\r", out: "ls\r"}},
		"tilde mid-line":       {{in: "a~.", out: "a~."}},
		"suspend at start":     {{in: "~\x1a", act: escapeSuspend}},
		"disconnect after CR":  {{in: "x\r~.y", out: "x\r", act: escapeDisconnect, rest: "y"}},
		"double tilde":         {{in: "~~.", out: "~."}},
		"tilde other":          {{in: "~a", out: "~a"}},
		"split across reads":   {{in: "ok\r~", out: "ok\r"}, {in: "\x1azz", act: escapeSuspend, rest: "zz"}},
		"held tilde then text": {{in: "\n~", out: "\n"}, {in: "b", out: "~b"}},
		"ctrl-c is input":      {{in: "\x03\x1c\x1a", out: "\x03\x1c\x1a"}},
	} {
		var f escapeFilter
		for i, s := range steps {
			out, act, rest := f.feed([]byte(s.in))
			if string(out) != s.out || act != s.act || string(rest) != s.rest {
				t.Errorf("%s step %d: feed(%q) = %q %v %q, want %q %v %q", name, i, s.in, out, act, rest, s.out, s.act, s.rest)
			}
		}
	}
}
