package runverb

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// OnUsageErrors makes a bad option or argument of each command in cmds
// (and their subcommands) a usage error (status 2, the README's) that
// names the option meant when one is near and the command's --help,
// instead of urfave/cli's "Incorrect Usage" over the whole help text and
// the status of a Lazaret failure.
func OnUsageErrors(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = UsageError
		}
		OnUsageErrors(cmd.Subcommands)
	}
}

// UsageError is OnUsageErrors' OnUsageError, for an App's too.
func UsageError(c *cli.Context, err error, _ bool) error {
	path := CommandPath(c)
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = fmt.Sprintf("`%s`: option %s needs a value", path, dashed(name))
	} else if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = fmt.Sprintf("`%s` has no option %s", path, dashed(name))
		var names []string
		if c.Command != nil {
			for _, f := range c.Command.Flags {
				names = append(names, f.Names()...)
			}
		}
		if near := NearestName(names, name); near != "" {
			msg += fmt.Sprintf("; did you mean %s?", dashed(near))
		}
	} else {
		msg = "`" + path + "`: " + msg
	}
	return errdefs.New(errdefs.ErrInvalid, "%s (`%s --help` lists the options)", msg, path)
}

// dashed is an option name as written: -p, --profile.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// CommandPath is the command line of c's command: "lazaret state ignored".
func CommandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(append([]string{c.App.Name}, names...), " ")
}

// NearestName is the name in names that name most likely means: one it
// begins (`stat`), one it abbreviates (`ls`: its letters in order, from the
// first), or one at most two edits away (`statsu`, for names of four
// letters or more); "" if none.
func NearestName(names []string, name string) string {
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
