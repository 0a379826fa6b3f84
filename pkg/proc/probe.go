package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// ProbeVersion names the registered operation sequence of
// PidfsHostSupportProbe; a cached success of another version is ignored.
const ProbeVersion = "pidfs-host-support-probe/v1"

// probeTimeout bounds the whole probe.
var probeTimeout = 10 * time.Second

// ProbeReport lists the observations of one successful probe.
type ProbeReport struct {
	Version      string
	BootID       pidfs.BootID
	Observations []string
}

// probeChild is a controllable child: the wrapper role blocked on a barrier
// that is never released, so it runs nothing and exits 125 at barrier EOF.
type probeChild struct {
	c  *Child
	bw *os.File
}

func (b *Broker) probeSpawn() (*probeChild, error) {
	br, bw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c, err := b.Start("probe", Command{Path: b.self, Args: []string{"lazaret-probe", WrapperArg, "--barrier-fd=3", "--", "/nonexistent-probe-target"}, Files: []*os.File{nil, nil, nil, br}})
	br.Close()
	if err != nil {
		bw.Close()
		return nil, err
	}
	return &probeChild{c: c, bw: bw}, nil
}

func (p *probeChild) end(ctx context.Context) (pidfs.ExitStatus, error) {
	p.bw.Close()
	return p.c.Wait(ctx)
}

// PidfsHostSupportProbe runs the spec's finite host support probe (§3.2):
// pidfd operations and pidfs magic, same-live-process concurrent and
// last-close/reopen identity, distinct simultaneous processes, stale-handle
// non-action, and exit/reap/drop-all/later-process non-reuse. Any missing
// operation, failed observation, cleanup uncertainty, timeout or unexpected
// equality refuses support (ErrUnsupportedHost). It proves nothing about
// global inode non-reuse; kernel builds are qualified separately.
func (b *Broker) PidfsHostSupportProbe(ctx context.Context) (ProbeReport, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	rep := ProbeReport{Version: ProbeVersion}
	refuse := func(format string, args ...any) (ProbeReport, error) {
		return rep, errdefs.New(errdefs.ErrUnsupportedHost, "pidfs host support probe refused: "+format+": Lazaret needs a qualified Linux ≥ 6.9 x86-64 kernel with pidfs", args...)
	}
	note := func(format string, args ...any) {
		rep.Observations = append(rep.Observations, fmt.Sprintf(format, args...))
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return refuse("boot id: %v", err)
	}
	rep.BootID = boot

	// 1. pidfd operations and pidfs magic (NewHandle checks the magic).
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		return refuse("pidfd_open(self): %v", err)
	}
	self.Close()
	note("pidfd_open and pidfs magic on self")

	a, err := b.probeSpawn()
	if err != nil {
		return refuse("spawn: %v", err)
	}
	bChild, err := b.probeSpawn()
	if err != nil {
		a.end(ctx)
		return refuse("spawn: %v", err)
	}
	cleanup := func() {
		a.end(ctx)
		bChild.end(ctx)
	}
	idA := a.c.Identity()
	// 2. Same live process, two descriptors at once: equal authority.
	h1, err1 := pidfs.Open(int(idA.HostPID))
	h2, err2 := pidfs.Open(int(idA.HostPID))
	if err1 != nil || err2 != nil {
		cleanup()
		return refuse("concurrent pidfd_open of a live child: %v %v", err1, err2)
	}
	if h1.Identity().Authority != idA.Authority || h2.Identity().Authority != idA.Authority {
		cleanup()
		return refuse("concurrent descriptors of one live process disagree")
	}
	// 3. Last close, then reopen: still equal.
	h1.Close()
	h2.Close()
	h3, err := pidfs.Open(int(idA.HostPID))
	if err != nil || h3.Identity().Authority != idA.Authority {
		cleanup()
		return refuse("last-close/reopen changed identity (%v)", err)
	}
	h3.Close()
	note("same-live-process identity stable across concurrent and last-close/reopen descriptors")
	// 4. Distinct simultaneous processes differ.
	idB := bChild.c.Identity()
	if idB.Authority == idA.Authority || idB.Ino == idA.Ino {
		cleanup()
		return refuse("two live processes share pidfs identity %d", idA.Ino)
	}
	note("distinct simultaneous processes have distinct identities (%d, %d)", idA.Ino, idB.Ino)
	// 5. Exit, reap, then stale-handle non-action through a retained pidfd.
	stale, err := pidfs.Open(int(idA.HostPID))
	if err != nil {
		cleanup()
		return refuse("retain pidfd: %v", err)
	}
	defer stale.Close()
	if st, err := a.end(ctx); err != nil || st.Code != wrapperAbort {
		bChild.end(ctx)
		return refuse("probe child did not end as expected (%v, %v): cleanup uncertain", st, err)
	}
	if err := stale.Signal(0); !errors.Is(err, os.ErrProcessDone) {
		bChild.end(ctx)
		return refuse("signal through a stale pidfd did not fail with ESRCH: %v", err)
	}
	if _, _, err := stale.Exited(); !errors.Is(err, unix.ECHILD) {
		bChild.end(ctx)
		return refuse("waitid on a reaped pidfd did not fail with ECHILD: %v", err)
	}
	note("stale pidfd after exit and reap: signal ESRCH, waitid ECHILD")
	if st, err := bChild.end(ctx); err != nil || st.Code != wrapperAbort {
		return refuse("second probe child did not end as expected (%v, %v): cleanup uncertain", st, err)
	}
	// 6. Drop all, then a later process never reuses an earlier identity.
	later, err := b.probeSpawn()
	if err != nil {
		return refuse("spawn: %v", err)
	}
	idL := later.c.Identity()
	if st, err := later.end(ctx); err != nil || st.Code != wrapperAbort {
		return refuse("later probe child did not end as expected (%v, %v)", st, err)
	}
	if idL.Ino <= idA.Ino || idL.Ino <= idB.Ino || idL.Dev != idA.Dev {
		return refuse("a later process got pidfs identity %d:%d, not after %d and %d", idL.Dev, idL.Ino, idA.Ino, idB.Ino)
	}
	note("later process identity %d follows earlier %d, %d (no reuse)", idL.Ino, idA.Ino, idB.Ino)
	if ctx.Err() != nil {
		return refuse("timeout")
	}
	return rep, nil
}
