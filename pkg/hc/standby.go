package hc

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hcstandby"
)

// StandbyMain is lazaret-hc's standby role (package hcstandby), started
// with the arguments identity that name its Domain: it waits for its CLI's
// request for that Domain and runs Main with it, the descriptors where a
// coordinator started directly has them. It returns 0 when the CLI closed
// the socket without a request (nothing to start), and 2 for a request it
// refuses, which that CLI reports as its start's failure (with the reason,
// when the request brought the ready pipe).
func StandbyMain(identity []string) int {
	req, files, err := hcstandby.Receive(hcstandby.FD, identity)
	unix.Close(hcstandby.FD)
	if err != nil {
		if len(files) == hcstandby.Files {
			// Refused with its descriptors: the Domain log and the CLI's
			// ready pipe (read as a failed start's report) say why.
			unix.Write(files[0], fmt.Appendf(nil, "lazaret-hc: %v\n", err))
			unix.Write(files[2], fmt.Appendf(nil, "%s\x00%s\n", errdefs.Category(err), err))
		}
		fdpass.CloseAll(files)
		return 2
	}
	if req == nil {
		return 0
	}
	for i, to := range [hcstandby.Files][]int{{1, 2}, {3}, {4}, {5}} {
		for _, t := range to {
			// The request's descriptors arrived above 5 (the standby
			// holds 0 to 5 while it waits).
			if err := unix.Dup3(files[i], t, 0); err != nil {
				fmt.Fprintf(os.Stderr, "lazaret-hc: standby: descriptor %d: %v\n", t, err)
				return 2
			}
		}
	}
	for _, f := range files {
		unix.Close(f)
	}
	os.Clearenv()
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	return Main(req.Args)
}
