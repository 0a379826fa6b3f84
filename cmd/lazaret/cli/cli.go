package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ExitLazaret is the exit status when Lazaret itself failed (the command did
// not run), as with other container tools.
const ExitLazaret = runverb.ExitLazaret

// exitError carries an exit status out of a command action.
type exitError = runverb.ExitError

// The run verb lives in package runverb, which the front links without
// this package; these names keep the other verbs' use of its profile and
// programs short.
type profile = runverb.Profile

var (
	lookupProfile      = runverb.LookupProfile
	lookupProfileIn    = runverb.LookupProfileIn
	imagesDir          = runverb.ImagesDir
	programGetenv      = runverb.ProgramGetenv
	programEnv         = runverb.ProgramEnv
	configuredPrograms = runverb.ConfiguredPrograms
)

func init() {
	// Here, unlike in the front, a recipe profile's run builds its image.
	runverb.EnsureRecipeImage = func(ctx context.Context, prof runverb.Profile, out io.Writer) error {
		_, err := ensureRecipeImage(ctx, prof, out, false)
		return err
	}
}

// front is the `lazaret` front binary that handed this process its command
// line ("" when lazaret-cli was run directly).
var front string

// appCommands are lazaret's verbs.
func appCommands() []*cli.Command {
	return []*cli.Command{runverb.Command, stopCommand, logsCommand, lsCommand, statusCommand, networkCommand, auditCommand, stateCommand, gcCommand, rmCommand, doctorCommand, kernelCommand, imageCommand, versionCommand, configCommand, profileCommand, aliasCommand, completionCommand, manCommand}
}

// Main runs the CLI and returns the process exit status.
func Main(args []string) int {
	front = os.Getenv(runverb.EnvFront)
	os.Unsetenv(runverb.EnvFront)
	app := &cli.App{
		Name:  "lazaret",
		Usage: "run AI coding agents in a rootless gVisor sandbox with your project at /workspace",
		Description: `Examples:
   lazaret run -- git status           run one command in this project's sandbox
   echo hi | lazaret run -- cat        stdin, stdout and stderr are relayed
   lazaret image build debian          build the default image (done by make run)
   lazaret doctor                      check this machine, with the fix for each problem
   eval "$(lazaret alias claude)"      make "claude" run in the claude profile's sandbox`,
		Commands:             appCommands(),
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		ExitErrHandler:       func(*cli.Context, error) {},
	}
	// An unknown verb (`lazaret statu`, `lazaret state ignored ls`) is a
	// usage error, said as such: urfave/cli would report "No help topic"
	// and exit as if Lazaret itself had failed.
	var unknown error
	app.CommandNotFound = func(c *cli.Context, name string) { unknown = unknownCommand(c, name) }
	err := app.Run(args)
	if unknown != nil {
		err = unknown
	}
	return runverb.ExitCode(err)
}

// unknownCommand is the usage error for a subcommand name that the command
// of c does not have, with the nearest one it has when one is near.
func unknownCommand(c *cli.Context, name string) error {
	path, commands := c.App.Name, c.App.Commands
	if c.Command != nil && len(c.Command.Subcommands) > 0 {
		path, commands = commandPath(c), c.Command.Subcommands
	}
	hint := ""
	if name == "help" {
		// The app has no help command: --help is on every command.
		return errdefs.New(errdefs.ErrInvalid, "`%s` has no command \"help\": `%s --help` lists its commands and `%s COMMAND --help` explains one", path, path, path)
	}
	if near := nearestCommand(commands, name); near != "" {
		hint = fmt.Sprintf("; did you mean `%s %s`?", path, near)
	}
	return errdefs.New(errdefs.ErrInvalid, "`%s` has no command %q%s (`%s --help` lists them)", path, name, hint, path)
}

// commandPath is the command line of c's command: "lazaret state ignored".
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(append([]string{c.App.Name}, names...), " ")
}

// nearestCommand is the name (or alias) of commands that name most likely
// means: one it begins (`stat`), one it abbreviates (`ls`: its letters in
// order, from the first), or one at most two edits away (`statsu`, for
// names of four letters or more); "" if none.
func nearestCommand(commands []*cli.Command, name string) string {
	if len(name) < 2 {
		return ""
	}
	abbrev, best, bestD := "", "", 3
	for _, cmd := range commands {
		if cmd.Hidden {
			continue
		}
		for _, n := range cmd.Names() {
			switch {
			case n == "help" || n == "h":
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
