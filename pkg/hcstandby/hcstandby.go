// Package hcstandby is the protocol between `lazaret run` and a standby
// Host Coordinator: lazaret-hc started before that CLI knows it will start
// its Domain, so that the coordinator's process start and package
// initialisation (several milliseconds of one processor on the cold
// start's path) overlap the CLI's host checks, configuration and
// workspace instead of following them (package client,
// StandbyCoordinator).
//
// The standby is started with the arguments and the environment that name
// its Domain (its workspace and profile, and the CLI's variables a
// coordinator gets), so that its command line and environment are a
// coordinator's from the start. It holds nothing and does nothing until its
// CLI sends, on the SOCK_SEQPACKET socket FD, one Request with exactly what
// a coordinator started directly gets: its arguments (which must include
// the ones it was started with), its environment and its descriptors
// (Files). A CLI that joins a running Domain, or exits, closes
// the socket instead, and the standby exits without a trace.
//
// Both sides link this package, so it imports neither the coordinator nor
// the client.
package hcstandby

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
)

// Arg, first on lazaret-hc's command line, makes it a standby. It is a
// flag, not a hidden role's "__lazaret-" word: a standby is the Domain's
// coordinator, waiting for its start (its command line reads
// `lazaret-hc --standby --workspace=W --profile=P`).
const Arg = "--standby"

// FD is the standby's end of its CLI's socket.
const FD = 3

// Version of Request; another is refused.
const Version = 1

// Files is the number of descriptors a Request carries, in this order:
// the Domain log (the coordinator's stdout and stderr), the locked Domain
// lock, the ready pipe and the profile memfd, which become descriptors 1
// and 2, 3, 4 and 5 (lazaret-hc's --lock-fd=3 --ready-fd=4 --profile-fd=5).
const Files = 4

// MaxRequest bounds a request's encoding.
const MaxRequest = 1 << 20

// Request is what the CLI sends its standby coordinator.
type Request struct {
	Version int      `json:"version"`
	Args    []string `json:"args"` // lazaret-hc's arguments after argv[0]
	Env     []string `json:"env"`  // its whole environment, KEY=VALUE
}

// Encode is the request's message for args and env.
func Encode(args, env []string) ([]byte, error) {
	return json.Marshal(Request{Version: Version, Args: args, Env: env})
}

// Receive reads the one request on fd for the standby started with the
// arguments identity (those after Arg: the --workspace and --profile that
// name its Domain), which the request's arguments must all include: a
// standby becomes only the coordinator it was started for. It returns nil
// (and no error) when the CLI closed the socket without a request. The
// descriptors are close-on-exec. A refused request's are returned with the
// error when all Files arrived (the caller reports the refusal on the log
// and the ready pipe, then closes them), closed otherwise.
func Receive(fd int, identity []string) (*Request, []int, error) {
	b, files, err := fdpass.RecvFiles(fd, MaxRequest, Files)
	if errors.Is(err, io.EOF) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, errdefs.Mark(fmt.Errorf("standby coordinator: read the request: %w", err), errdefs.ErrCorrupt)
	}
	req, err := Decode(b, len(files))
	if err == nil {
		err = req.For(identity)
	}
	if err != nil {
		if len(files) == Files {
			return nil, files, err
		}
		fdpass.CloseAll(files)
		return nil, nil, err
	}
	return req, files, nil
}

// For checks that the request's arguments include each of identity.
func (r *Request) For(identity []string) error {
	for _, a := range identity {
		if !slices.Contains(r.Args, a) {
			return errdefs.New(errdefs.ErrRefused, "standby coordinator: started with %s, asked to start without it", a)
		}
	}
	return nil
}

// Decode checks a request: of this Version, with arguments, and carrying
// files descriptors, which must be Files.
func Decode(b []byte, files int) (*Request, error) {
	var req Request
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("standby coordinator: the request is not one: %w", err), errdefs.ErrCorrupt)
	}
	switch {
	case req.Version != Version:
		return nil, errdefs.New(errdefs.ErrRefused, "standby coordinator: request version %d, this lazaret-hc reads %d: lazaret and lazaret-hc come from different builds (reinstall Lazaret)", req.Version, Version)
	case len(req.Args) == 0:
		return nil, errdefs.New(errdefs.ErrCorrupt, "standby coordinator: the request has no arguments")
	case files != Files:
		return nil, errdefs.New(errdefs.ErrCorrupt, "standby coordinator: the request carries %d descriptors, not %d", files, Files)
	}
	return &req, nil
}
