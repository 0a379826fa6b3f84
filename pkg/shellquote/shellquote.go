// Package shellquote writes a word so that a POSIX shell reads it back as
// that one word: for the commands Lazaret's messages tell a developer to
// paste (`lazaret rm -p tiny -C '/src/my app'`) and the functions
// `lazaret alias` prints.
package shellquote

import "strings"

// Word is s as one shell word: as it is when it holds only characters no
// shell treats specially, else in single quotes (a single quote inside
// closed, escaped and reopened).
func Word(s string) string {
	if s != "" && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
