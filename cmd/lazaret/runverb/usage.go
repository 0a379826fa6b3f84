package runverb

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/suggest"
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
		if near := suggest.Nearest(names, name); near != "" {
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
