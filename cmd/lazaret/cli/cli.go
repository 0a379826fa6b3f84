package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ExitLazaret is the exit status when Lazaret itself failed (the command did
// not run), as with other container tools.
const ExitLazaret = 125

// exitError carries an exit status out of a command action.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// appCommands are lazaret's verbs.
func appCommands() []*cli.Command {
	return []*cli.Command{runCommand, stopCommand, logsCommand, lsCommand, statusCommand, networkCommand, auditCommand, stateCommand, gcCommand, rmCommand, doctorCommand, kernelCommand, imageCommand, versionCommand, configCommand, profileCommand, aliasCommand, completionCommand, manCommand}
}

// Main runs the CLI and returns the process exit status.
func Main(args []string) int {
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
	err := app.Run(args)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(os.Stderr, "lazaret: %v\n", err)
	if errors.Is(err, errdefs.ErrInvalid) {
		return 2
	}
	return ExitLazaret
}
