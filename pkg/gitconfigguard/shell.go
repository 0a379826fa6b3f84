package gitconfigguard

import (
	"path"
	"strings"
)

// programs returns the words of the shell command line s that name a
// program or a script host Git's shell would run: the first word of every
// simple command (after variable assignments and the wrappers env, exec,
// command, nohup, nice and time), and for an interpreter (sh, bash,
// python, node, …) its script argument or, for `sh -c STRING`, the
// programs of STRING. Words are unquoted; nothing is expanded here.
//
// It is a conservative reading of POSIX shell syntax for one purpose —
// finding workspace paths host Git would execute — not a shell: operators
// (; & | && || ( ) $( ` and newlines) end a command, reserved words are
// skipped, and a redirection's target is never a program.
func programs(s string) []string {
	return programsDepth(s, 0)
}

func programsDepth(s string, depth int) []string {
	var out []string
	cmds, nested := simpleCommands(s)
	for _, words := range cmds {
		out = append(out, programsOf(words, depth)...)
	}
	if depth < maxNesting {
		for _, n := range nested {
			out = append(out, programsDepth(n, depth+1)...)
		}
	}
	return out
}

// maxNesting bounds `sh -c` and command substitutions within quotes.
const maxNesting = 4

// reserved are shell words after which a command starts.
var reserved = map[string]bool{
	"!": true, "{": true, "}": true, "if": true, "then": true, "else": true, "elif": true, "fi": true,
	"do": true, "done": true, "while": true, "until": true, "for": true, "case": true, "esac": true,
	"function": true,
}

// wrappers run their first non-option, non-assignment argument.
var wrappers = map[string]bool{"env": true, "exec": true, "command": true, "nohup": true, "nice": true, "time": true, "builtin": true}

// interpreters run their first non-option argument as a script; shells
// also run the argument of -c as a command line.
var interpreters = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true,
	"python": true, "python2": true, "python3": true, "node": true, "nodejs": true, "deno": true, "bun": true,
	"perl": true, "ruby": true, "php": true, "lua": true, "tclsh": true,
}

var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

func programsOf(words []string, depth int) []string {
	var out []string
	i := 0
	for i < len(words) {
		w := words[i]
		switch {
		case reserved[w]:
			i++
			continue
		case isAssignment(w):
			i++
			continue
		case wrappers[path.Base(w)]:
			if strings.Contains(w, "/") {
				out = append(out, w) // /usr/bin/env, or a workspace file named env
			}
			i++
			for i < len(words) && (strings.HasPrefix(words[i], "-") || isAssignment(words[i]) || isNumber(words[i])) {
				i++
			}
			continue
		}
		break
	}
	if i >= len(words) {
		return out
	}
	prog := words[i]
	out = append(out, prog)
	base := path.Base(prog)
	if !interpreters[base] {
		return out
	}
	for j := i + 1; j < len(words); j++ {
		a := words[j]
		if a == "--" {
			if j+1 < len(words) {
				out = append(out, words[j+1])
			}
			break
		}
		if strings.HasPrefix(a, "-") {
			switch {
			case shells[base] && a == "-c":
				if j+1 < len(words) && depth < maxNesting {
					out = append(out, programsDepth(words[j+1], depth+1)...)
				}
				return out
			case !shells[base] && (a == "-c" || a == "-e" || a == "-m" || a == "-E"):
				return out // inline code or a module, not a file
			}
			continue
		}
		out = append(out, a)
		break
	}
	return out
}

// isNumber reports whether w is a decimal number (an option's argument,
// as in `nice -n 5`).
func isNumber(w string) bool {
	if w == "" {
		return false
	}
	for _, c := range w {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isAssignment reports whether w is NAME=value.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for k, c := range name {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || k > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// simpleCommands splits s into the unquoted words of its simple commands;
// nested are the command substitutions found within double quotes.
func simpleCommands(s string) (cmds [][]string, nested []string) {
	var words []string
	var cur strings.Builder
	inWord, redirect := false, false
	endWord := func() {
		if inWord {
			if redirect {
				redirect = false // a redirection's target
			} else {
				words = append(words, cur.String())
			}
		}
		cur.Reset()
		inWord = false
	}
	endCmd := func() {
		endWord()
		redirect = false
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					cur.WriteByte(s[i])
					inWord = true
				}
			}
		case c == '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				cur.WriteString(s[i+1:])
				i = len(s)
				break
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if sub, k := substitution(s[i:]); k > 0 {
					nested = append(nested, sub)
					cur.WriteString(s[i : i+k])
					i += k - 1
					continue
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			for i < len(s) && s[i] != '\n' {
				i++
			}
			endCmd()
		case c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '\n' || c == '`':
			endCmd()
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			endCmd()
			i++
		case c == '<' || c == '>':
			endWord()
			for i+1 < len(s) && (s[i+1] == '<' || s[i+1] == '>' || s[i+1] == '&') {
				i++
			}
			redirect = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds, nested
}

// substitution recognises a command substitution at the start of s,
// $(…) with nested parentheses or `…`, and returns its command line and
// its length (0: none).
func substitution(s string) (string, int) {
	switch {
	case strings.HasPrefix(s, "$("):
		level := 0
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '(':
				level++
			case ')':
				if level--; level == 0 {
					return s[2:i], i + 1
				}
			}
		}
		return s[2:], len(s)
	case strings.HasPrefix(s, "`"):
		if j := strings.IndexByte(s[1:], '`'); j >= 0 {
			return s[1 : 1+j], j + 2
		}
		return s[1:], len(s)
	}
	return "", 0
}
