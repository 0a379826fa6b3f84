package proc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// SuiteVersion names the registered operation sequence of the kernel
// qualification suite; a host qualification record names the suite that
// passed.
const SuiteVersion = "kernel-qualification/v1"

// The suite's bounds.
const (
	// QualifyProbes is how often the support probe is repeated.
	QualifyProbes = 20
	// QualifyProcesses is the length of the inode monotonicity run.
	QualifyProcesses = 500
)

// suiteTimeout bounds the whole suite (it takes seconds).
var suiteTimeout = 5 * time.Minute

// QualifyBrokerArg is argv[1] of the parent-death step's broker role.
const QualifyBrokerArg = "__lazaret-qualify-broker"

// BarrierModes are the two acquisition barriers the parent-death step
// proves: the wrapper re-exec and the target's own exec stop.
var BarrierModes = []string{"wrapper", "exec-stop"}

// MaybeRunQualifyBroker runs the parent-death step's broker role when
// argv asks for it, and exits. Binaries that run the suite (lazaret, and
// the test binary of this package) call it first in main.
func MaybeRunQualifyBroker() {
	if len(os.Args) > 2 && os.Args[1] == QualifyBrokerArg {
		os.Exit(qualifyBrokerRole(os.Args[2]))
	}
}

// qualifyBrokerRole acquires `sleep 60` through the named barrier, prints
// the target's pid and waits to be killed: its death must kill the target.
func qualifyBrokerRole(mode string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	b, err := NewBroker(slog.New(slog.NewTextHandler(io.Discard, nil)), exe)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	spec := AcquireSpec{Slot: "qualify-target", Target: Command{Path: "/bin/sleep", Args: []string{"sleep", "60"}}}
	acquire := b.Acquire
	if mode == "exec-stop" {
		acquire = b.acquireExecStop // no fallback: the suite proves this path
	}
	c, err := acquire(context.Background(), spec)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println(c.Identity().HostPID)
	time.Sleep(time.Minute) // killed by the suite long before
	return 1
}

// ParentDeathKillsTarget proves the parent-death edge of an acquisition
// barrier (mode, one of BarrierModes): a broker process acquires a target,
// the broker is killed, and the target must die with it within two
// seconds. A surviving target is killed through its retained pidfd.
func (b *Broker) ParentDeathKillsTarget(ctx context.Context, mode string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	c, err := b.Start("qualify-broker", Command{Path: b.self, Args: []string{"lazaret-qualify-broker", QualifyBrokerArg, mode}, Files: []*os.File{nil, w, os.Stderr}})
	w.Close()
	if err != nil {
		return err
	}
	defer func() {
		c.Signal(unix.SIGKILL)
		c.Wait(context.Background())
	}()
	line, err := bufio.NewReader(io.LimitReader(r, 256)).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if perr != nil || pid <= 0 {
		return fmt.Errorf("the %s broker did not acquire its target: it said %q (%v)", mode, strings.TrimSpace(line), err)
	}
	target, err := pidfs.Open(pid)
	if err != nil {
		return fmt.Errorf("open the acquired target %d: %w", pid, err)
	}
	defer target.Close()
	if err := c.Signal(unix.SIGKILL); err != nil {
		return fmt.Errorf("kill the %s broker: %w", mode, err)
	}
	c.Wait(ctx)
	for i := 0; i < 100 && target.Alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if target.Alive() {
		target.Signal(unix.SIGKILL)
		return fmt.Errorf("the target acquired through the %s barrier survived its broker's death", mode)
	}
	return nil
}

// QualificationSuite runs the kernel qualification suite (spec §3.2) and
// reports each step's result through say:
//
//  1. the PidfsHostSupportProbe, with its observations;
//  2. the probe repeated QualifyProbes times;
//  3. QualifyProcesses consecutive processes, whose pidfs inodes must be
//     strictly increasing and distinct (the boot-monotonic allocation the
//     spec relies on);
//  4. the parent-death kill through both acquisition barriers.
//
// Any failure ends the suite with an ErrUnsupportedHost error naming the
// step. The suite needs a broker whose binary answers the wrapper role and
// MaybeRunQualifyBroker.
func (b *Broker) QualificationSuite(ctx context.Context, say func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, suiteTimeout)
	defer cancel()
	fail := func(format string, args ...any) error {
		say("FAILED: " + fmt.Sprintf(format, args...))
		return errdefs.New(errdefs.ErrUnsupportedHost, "kernel qualification suite failed: "+format, args...)
	}
	rep, err := b.PidfsHostSupportProbe(ctx)
	if err != nil {
		return fail("support probe: %v", err)
	}
	say(fmt.Sprintf("support probe %s: passed (boot %s)", rep.Version, rep.BootID))
	for _, o := range rep.Observations {
		say("  " + o)
	}
	for i := 1; i <= QualifyProbes; i++ {
		if _, err := b.PidfsHostSupportProbe(ctx); err != nil {
			return fail("probe %d of %d: %v", i, QualifyProbes, err)
		}
	}
	say(fmt.Sprintf("support probe repeated %d times: passed", QualifyProbes))
	var first, last uint64
	seen := make(map[uint64]bool, QualifyProcesses)
	for i := 0; i < QualifyProcesses; i++ {
		c, err := b.probeSpawn()
		if err != nil {
			return fail("monotonicity run, process %d: spawn: %v", i, err)
		}
		id := c.c.Identity()
		if st, err := c.end(ctx); err != nil || st.Code != wrapperAbort {
			return fail("monotonicity run, process %d did not end as expected (%v, %v)", i, st, err)
		}
		if id.Ino <= last || seen[id.Ino] {
			return fail("monotonicity run: pidfs inode %d after %d (process %d): not strictly increasing", id.Ino, last, i)
		}
		if i == 0 {
			first = id.Ino
		}
		seen[id.Ino] = true
		last = id.Ino
	}
	say(fmt.Sprintf("%d consecutive processes with strictly increasing, distinct pidfs inodes (%d … %d): passed", QualifyProcesses, first, last))
	for _, mode := range BarrierModes {
		if err := b.ParentDeathKillsTarget(ctx, mode); err != nil {
			return fail("parent-death kill (%s barrier): %v", mode, err)
		}
		say(fmt.Sprintf("parent-death kill through the %s barrier: passed", mode))
	}
	if ctx.Err() != nil {
		return fail("timeout after %s", suiteTimeout)
	}
	return nil
}

// QualifySuiteArg is argv[1] of the role that runs QualificationSuite in a
// process of its own (as `go test ./pkg/proc` did): its broker owns every
// process the suite spawns, and nothing else runs in it.
const QualifySuiteArg = "__lazaret-kernel-suite"

// SuitePassed is the suite role's last line on success.
const SuitePassed = "qualification: PASSED"

// MaybeRunQualificationSuite runs the suite role when argv asks for it:
// one line per step on stdout, SuitePassed last, exit 0; on failure the
// error last and exit 1.
func MaybeRunQualificationSuite() {
	if len(os.Args) < 2 || os.Args[1] != QualifySuiteArg {
		return
	}
	say := func(l string) { fmt.Println(l) }
	exe, err := os.Executable()
	if err != nil {
		say("qualification: FAILED: " + err.Error())
		os.Exit(1)
	}
	b, err := NewBroker(slog.New(slog.NewTextHandler(io.Discard, nil)), exe)
	if err == nil {
		err = b.QualificationSuite(context.Background(), say)
	}
	if err != nil {
		say("qualification: FAILED: " + err.Error())
		os.Exit(1)
	}
	say(SuitePassed)
	os.Exit(0)
}
