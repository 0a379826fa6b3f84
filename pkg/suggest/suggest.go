// Package suggest finds the name a person most likely meant when the one
// they typed does not exist — a command, an option, a configuration key —
// for the "did you mean" of a usage error. It only ever proposes: the
// caller refuses the unknown name whatever it finds.
package suggest

import "strings"

// Nearest is the name in names that name most likely means: one it
// begins (`stat`), one it abbreviates (`ls`: its letters in order, from the
// first), or one at most two edits away (`statsu`, for names of four
// letters or more); "" if none.
func Nearest(names []string, name string) string {
	if len(name) < 2 {
		return ""
	}
	abbrev, best, bestD := "", "", 3
	for _, n := range names {
		switch {
		case n == name || len(n) < 2:
		case strings.HasPrefix(n, name):
			return n
		case abbrev == "" && abbreviates(name, n):
			abbrev = n
		case len(name) >= 4:
			if d := editDistance(n, name); d < bestD {
				best, bestD = n, d
			}
		}
	}
	if abbrev != "" {
		return abbrev
	}
	return best
}

// abbreviates reports whether the letters of short appear in long in
// order, starting with long's first.
func abbreviates(short, long string) bool {
	if short == "" || long == "" || short[0] != long[0] {
		return false
	}
	i := 0
	for j := 0; j < len(long) && i < len(short); j++ {
		if long[j] == short[i] {
			i++
		}
	}
	return i == len(short)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
