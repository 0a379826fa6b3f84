package record

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// QuoteArgv renders argv unambiguously for a prompt: each element in single
// quotes when it is plain printable text, otherwise Go-quoted ("…" with
// control characters, invalid UTF-8, quotes and backslashes escaped), so no
// byte of an element can move the cursor, recolour the terminal or pass for
// an element boundary.
func QuoteArgv(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = quoteArg(a)
	}
	return strings.Join(parts, " ")
}

func quoteArg(a string) string {
	plain := a != "" && utf8.ValidString(a)
	for _, r := range a {
		if !unicode.IsPrint(r) || r == '\'' || r == '\\' || r == '"' {
			plain = false
			break
		}
	}
	if plain {
		return "'" + a + "'"
	}
	return strconv.QuoteToASCII(a)
}

// EscapeText renders one line of untrusted text (a justification, a cwd)
// with control characters and invalid UTF-8 escaped.
func EscapeText(s string) string {
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// ParseArgv splits an edited command line into argv without any shell
// semantics: elements are separated by blanks; '…' quotes literally; "…"
// quotes with \" and \\ escapes; outside quotes a backslash escapes the next
// character. No variables, globs, redirections or command separators exist:
// `;`, `|`, `$` are ordinary characters.
func ParseArgv(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errdefs.New(errdefs.ErrInvalid, "unterminated ' quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			in = true
		case ch == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, errdefs.New(errdefs.ErrInvalid, "unterminated \" quote")
			}
			in = true
		case ch == '\\':
			if i+1 >= len(line) {
				return nil, errdefs.New(errdefs.ErrInvalid, "trailing backslash")
			}
			i++
			cur.WriteByte(line[i])
			in = true
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	if len(out) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalid, "empty command")
	}
	return out, nil
}

// CheckArgv validates a requested or approved argv: at least a non-empty
// program, no NUL byte (execve cannot carry one) and a bounded size.
func CheckArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errdefs.New(errdefs.ErrInvalid, "empty command")
	}
	if len(argv) > 4096 {
		return errdefs.New(errdefs.ErrInvalid, "command has %d arguments; at most 4096", len(argv))
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.New(errdefs.ErrInvalid, "argument %d contains a NUL byte", i)
		}
	}
	return nil
}
