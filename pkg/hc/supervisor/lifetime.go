package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/trust"
)

// SubordinateMapper returns the production id mapping: 0 → the developer,
// 1.. → the developer's subordinate ids. The maps are what unshare(1)
// writes when it creates RS's namespaces (proc.AcquireSpec.Maps: it runs
// newuidmap and newgidmap itself before it executes RS, which keeps two
// spawns and their waits off the coordinator's start); the function
// writes them with newuidmap and newgidmap (run through broker, both at
// once: the maps are independent) when RS is cloned instead. It fails at
// once when the host has no subordinate range or no id-map tools.
func SubordinateMapper(broker *proc.Broker) (func(ctx context.Context, pid int) error, *proc.IDMaps, error) {
	host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	uids, gids, err := host.SubIDs()
	if err != nil {
		return nil, nil, err
	}
	newuidmap, newgidmap, err := host.IDMapTools()
	if err != nil {
		return nil, nil, err
	}
	maps := &proc.IDMaps{
		UID: []proc.IDMap{{Inner: 0, Outer: uint32(os.Getuid()), Count: 1}, {Inner: 1, Outer: uids.Start, Count: uids.Count}},
		GID: []proc.IDMap{{Inner: 0, Outer: uint32(os.Getgid()), Count: 1}, {Inner: 1, Outer: gids.Start, Count: gids.Count}},
	}
	return func(ctx context.Context, pid int) error {
		tools := []struct {
			path  string
			lines []proc.IDMap
		}{{newuidmap, maps.UID}, {newgidmap, maps.GID}}
		errs := make([]error, len(tools))
		var wg sync.WaitGroup
		for i, t := range tools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// newuidmap PID INNER OUTER COUNT ...: the lines unshare(1)
				// would have written.
				argv := []string{filepath.Base(t.path), strconv.Itoa(pid)}
				for _, l := range t.lines {
					argv = append(argv, strconv.FormatUint(uint64(l.Inner), 10), strconv.FormatUint(uint64(l.Outer), 10), strconv.FormatUint(uint64(l.Count), 10))
				}
				_, stderr, st, err := broker.Output(ctx, argv[0], proc.Command{Path: t.path, Args: argv, Env: []string{"PATH=/usr/bin:/bin"}}, 4096)
				if err == nil && st.ShellCode() != 0 {
					err = errdefs.New(errdefs.ErrUnsupportedHost, "%s failed (%s): %s; check /etc/subuid and /etc/subgid for your user", argv[0], st, strings.TrimSpace(string(stderr)))
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}, maps, nil
}

// channel returns the HC↔RS channel once the coordinator holds it.
func (d *Driver) channel() *fdpass.Channel {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.held {
		return nil
	}
	return d.ch
}

// Send sends m to RS.
func (d *Driver) Send(ctx context.Context, m *lv1.CoordinatorMessage) error {
	ch := d.channel()
	if ch == nil {
		return errNoChannel
	}
	return ch.Send(ctx, m)
}

// Recv reads RS's next message into m.
func (d *Driver) Recv(ctx context.Context, m *lv1.SupervisorMessage) error {
	ch := d.channel()
	if ch == nil {
		return errNoChannel
	}
	return ch.Recv(ctx, m)
}

// VerifyStaged refuses a StagedProcessOwnership that is not signed by this
// generation's RS credential (unsigned, another key, altered after
// signing), before anything of it is recorded or acknowledged.
func (d *Driver) VerifyStaged(s *lv1.StagedProcessOwnership) error {
	d.mu.Lock()
	cred := d.cred
	d.mu.Unlock()
	unsigned := proto.Clone(s).(*lv1.StagedProcessOwnership)
	unsigned.Signature = nil
	payload, err := fdpass.SigningPayload(unsigned)
	if err != nil {
		return err
	}
	if cred == nil || trust.Verify(cred.Claims.PublicKey, trust.RecordStagedProcessOwnership, payload, s.Signature) != nil {
		return errdefs.New(errdefs.ErrRefused, "StagedProcessOwnership is not signed by this generation's runtime supervisor credential")
	}
	return nil
}

// ReportStopped records that RS reported SupervisorStopped.
func (d *Driver) ReportStopped() {
	d.stopOne.Do(func() { close(d.stopped) })
}

// AwaitStopped reports whether RS reported SupervisorStopped, waiting at
// most wait for the report (the exchange that reads it may lag behind
// RS's exit).
func (d *Driver) AwaitStopped(wait time.Duration) bool {
	select {
	case <-d.stopped:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.stopped:
		return true
	case <-t.C:
		return false
	}
}

// Stop asks RS to stop the sandbox (StopSandbox, if the coordinator holds
// the channel) and waits for its exit, bounded by Config.StopWait; past
// the bound it kills RS through its pidfd and reaps it. It returns RS,
// nil if it was never acquired (nothing to stop).
func (d *Driver) Stop(ctx context.Context) *proc.Child {
	child := d.Child()
	if child == nil {
		return nil
	}
	if ch := d.channel(); ch != nil {
		ch.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Stop{Stop: &lv1.StopSandbox{}}})
	}
	d.awaitExit(child)
	return child
}

// awaitExit waits for child's exit, bounded, then kills it.
func (d *Driver) awaitExit(child *proc.Child) {
	select {
	case <-child.Done():
	case <-time.After(d.cfg.StopWait):
		d.log.Error("runtime supervisor did not stop: SIGKILL through its pidfd")
		d.mu.Lock()
		d.killed = true
		d.mu.Unlock()
		child.Signal(unix.SIGKILL)
		<-child.Done()
	}
}

// Close closes the lifetime pipe's write end the coordinator holds (RS,
// if still running, then ends as when its coordinator dies).
func (d *Driver) Close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	w := d.lifetimeW
	if !d.held {
		w = nil
	}
	d.mu.Unlock()
	if w != nil {
		w.Close()
	}
}
