// Package runverb is the `lazaret run` verb, the hot path of the Client
// CLI, and what it needs: the profile lookup, the credentials, the
// configured programs, and the non-interactive and terminal session relays.
//
// It is kept free of the packages the other verbs need (the Domain Store,
// image building, FUSE, state maintenance): they cost milliseconds of
// package initialisation on every start of a binary that links them. The
// `lazaret` binary (cmd/lazaret) is the front: it links this package and
// runs `lazaret run` itself, and hands every other command line to the
// full CLI, `lazaret-cli` (cmd/lazaret-cli, package cmd/lazaret/cli), which
// has every verb, this one included. A run whose profile has a recipe is
// handed over too (ErrFullCLI): building the recipe image needs the image
// packages.
package runverb

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ExitError carries an exit status out of a command action.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit %d", e.Code) }

// ExitStopped is the exit status of `lazaret run` whose session was ended
// by `lazaret stop`: 128+SIGTERM, as for a command stopped from outside.
const ExitStopped = 143

// StoppedMessage is what such a `lazaret run` prints on stderr (after its
// terminal is restored).
const StoppedMessage = "lazaret: the Domain was stopped by `lazaret stop`"

// ErrFullCLI is returned by the run verb of the front when the command
// needs the full CLI (a profile with a recipe): nothing has started yet,
// and the front hands the same command line to lazaret-cli.
var ErrFullCLI = errors.New("this command runs in the full CLI (lazaret-cli)")

// EnsureRecipeImage builds a recipe profile's image when it is missing or
// its base changed. The full CLI sets it; in the front it is nil and a
// recipe profile's run returns ErrFullCLI.
var EnsureRecipeImage func(ctx context.Context, prof Profile, out io.Writer) error
