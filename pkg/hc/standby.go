package hc

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
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
	go warmStart()
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

// warmStart does, while the standby waits for its request (its CLI is
// still checking the host, a processor is idle), the one-time
// initialisations the coordinator's start would otherwise do on first use
// on its critical path with both processors busy: the Ed25519 base-point
// table (the Trust Anchor's keys and signatures) and the lazily built
// codecs of the protocol's messages (those of the sandbox's readiness, the
// publication's records and the session frames are first used after
// runsc's boot). A directly started coordinator does not: there it would
// compete with the start itself. It returns how many message types it
// initialised. Measured over 150 interleaved cold starts: the trust anchor
// 4.0 ms sooner, the publication 2.5 ms and the CLI's exit 2.8 ms sooner
// (stage medians; paired wall time −4 ms mean).
func warmStart() int {
	ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pkg := (&lv1.RunRequest{}).ProtoReflect().Descriptor().ParentFile().Package()
	n := 0
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if mt.Descriptor().ParentFile().Package() == pkg {
			proto.Marshal(mt.New().Interface())
			n++
		}
		return true
	})
	return n
}
