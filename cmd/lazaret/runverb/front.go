package runverb

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/termtext"
)

// ExitLazaret is the exit status when Lazaret itself failed (the command did
// not run), as with other container tools.
const ExitLazaret = 125

// EnvFront names the front binary to the full CLI it hands a command line
// to (the full CLI's own path is in libexec): `lazaret alias` prints the
// front, which users run.
const EnvFront = "LAZARET_FRONT"

// Main is the front's CLI: `lazaret run` runs here, and every other command
// line (help and completion included) is handed to lazaret-cli by exec, in
// this same process, with the same arguments.
func Main(args []string) int {
	if !IsRun(args) {
		return handOver(args)
	}
	if self, err := locate.Self(); err == nil {
		// This binary hosts a coordinator's wrappers (package main);
		// lazaret-cli, which runs this verb for a recipe build, does not.
		frontExe = self
	}
	app := &cli.App{
		Name:            "lazaret",
		Commands:        []*cli.Command{Command},
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError:    UsageError,
	}
	OnUsageErrors(app.Commands)
	err := app.Run(args)
	if errors.Is(err, ErrFullCLI) {
		return handOver(args)
	}
	return ExitCode(err)
}

// frontExe is the front binary's path when this process is the front (Main
// ran), named to a coordinator it starts (client.Starter.FrontExe).
var frontExe string

// IsRun reports whether the front runs args itself: the `run` verb, not a
// shell completion request.
func IsRun(args []string) bool {
	return len(args) > 1 && args[1] == Command.Name && !slices.Contains(args, "--generate-bash-completion")
}

// handOver execs lazaret-cli with args; it returns only when that fails.
func handOver(args []string) int {
	path, err := locate.Find(locate.CLI, os.Getenv)
	if err != nil {
		return ExitCode(fmt.Errorf("the full CLI: %w", err))
	}
	env := os.Environ()
	if exe, err := os.Executable(); err == nil {
		env = append(env, EnvFront+"="+exe)
	}
	err = unix.Exec(path, args, env)
	return ExitCode(fmt.Errorf("exec %s: %w", path, err))
}

// ExitCode is the process exit status of a command's error, which it
// reports on stderr: 0 for none, an ExitError's status, 2 for invalid use,
// otherwise ExitLazaret.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	// An error can name what the sandbox made (a path, a name).
	fmt.Fprintf(os.Stderr, "lazaret: %s\n", termtext.Escape(err.Error()))
	if errors.Is(err, errdefs.ErrInvalid) {
		return 2
	}
	return ExitLazaret
}
