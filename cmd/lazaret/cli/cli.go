package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/cmd/lazaret/runverb"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/suggest"
	"github.com/lazaret/lazaret/pkg/termtext"
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
		_, err := ensureRecipeImage(ctx, prof, out, recipeForRun)
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
	if len(args) == 2 && (args[1] == "--version" || args[1] == "-V") {
		args = []string{args[0], versionCommand.Name} // as other tools answer it
	}
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
	// On a terminal, nothing the commands print (names the sandbox made,
	// recipe output, the Domain's log) can act on it (package termtext);
	// to a pipe it goes as it is (the text formats escape what the sandbox
	// named themselves, --json keeps it exact).
	app.Writer, app.ErrWriter = runverb.TerminalSafe(os.Stdout), runverb.TerminalSafe(os.Stderr)
	defer flushTerminal(app.Writer)
	defer flushTerminal(app.ErrWriter)
	// An unknown verb (`lazaret statu`, `lazaret state ignored ls`) is a
	// usage error, said as such: urfave/cli would report "No help topic"
	// and exit as if Lazaret itself had failed.
	runverb.OnUsageErrors(app.Commands)
	refuseStrayArgs(app.Commands, app.Name)
	app.OnUsageError = runverb.UsageError
	var unknown error
	app.CommandNotFound = func(c *cli.Context, name string) { unknown = unknownCommand(c, name) }
	err := app.Run(args)
	if unknown != nil {
		err = unknown
	}
	return runverb.ExitCode(err)
}

// nearestCommand is the visible command of commands that name most likely
// means (suggest.Nearest over their names and aliases), "" if none.
func nearestCommand(commands []*cli.Command, name string) string {
	var names []string
	for _, cmd := range commands {
		if !cmd.Hidden && cmd.Name != "help" {
			names = append(names, cmd.Names()...)
		}
	}
	return suggest.Nearest(names, name)
}

// unknownCommand is the usage error for a subcommand name that the command
// of c does not have, with the nearest one it has when one is near.
func unknownCommand(c *cli.Context, name string) error {
	path, commands := c.App.Name, c.App.Commands
	if c.Command != nil && len(c.Command.Subcommands) > 0 {
		path, commands = runverb.CommandPath(c), c.Command.Subcommands
	}
	if name == "help" {
		// The app has no help command: --help is on every command.
		return errdefs.New(errdefs.ErrInvalid, "`%s` has no command \"help\": `%s --help` lists its commands and `%s COMMAND --help` explains one", path, path, path)
	}
	hint := ""
	if near := nearestCommand(commands, name); near != "" {
		hint = fmt.Sprintf("; did you mean `%s %s`?", path, near)
	}
	return errdefs.New(errdefs.ErrInvalid, "`%s` has no command %q%s (`%s --help` lists them)", path, name, hint, path)
}

// refuseStrayArgs makes every command of cmds (and their subcommands) that
// declares no arguments (an empty ArgsUsage) refuse one as a usage error,
// before it does anything: `lazaret status foo` or `lazaret gc old` ran as
// if the word were not there. A command with --profile and --dir says
// what names its Domain instead.
func refuseStrayArgs(cmds []*cli.Command, parent string) {
	for _, cmd := range cmds {
		path := parent + " " + cmd.Name
		refuseStrayArgs(cmd.Subcommands, path)
		if cmd.Action == nil || cmd.ArgsUsage != "" || cmd.SkipFlagParsing {
			continue
		}
		hint := ""
		if hasFlag(cmd, "profile") && hasFlag(cmd, "dir") {
			hint = ": the Domain is that of -p PROFILE and -C DIR"
			if hasFlag(cmd, "all") {
				hint += ", or with --all every one"
			}
		}
		action := cmd.Action
		cmd.Action = func(c *cli.Context) error {
			if c.Args().Present() {
				return errdefs.New(errdefs.ErrInvalid, "`%s` takes no arguments (got %q)%s", path, c.Args().First(), hint)
			}
			return action(c)
		}
	}
}

// hasFlag reports whether cmd has a flag of that name.
func hasFlag(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// flushTerminal writes what a termtext.Writer holds (an incomplete rune).
func flushTerminal(w io.Writer) {
	if t, ok := w.(*termtext.Writer); ok {
		t.Flush()
	}
}
