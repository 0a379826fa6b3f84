// Package sandboxinit is the Agent Sandbox's init process (PID 1 of the
// guest): the root process of the attached `runsc run`. It makes the
// profile's session user exist (package guestuser), runs the
// generation's network readiness probe in the sandbox's network view
// (package netprobe) and prints its report, then reports readiness on its
// stdout (a pipe read by the Runtime Supervisor),
// reaps orphaned guest processes, and exits when its stdin (held by the
// Runtime Supervisor) reaches EOF — which ends the container and every guest
// process in it. It is terminal-neutral: sessions attach with `runsc exec`,
// except a generation's first non-interactive session, whose command
// the init starts itself when the Host Coordinator asks (firstsession.go).
//
// It runs inside gVisor, never on the host, and is the lazaret-init
// binary (with the session launcher, ExecMain), which Lazaret mounts into
// the sandbox beside lazaret-escalate. It is kept out of the escalation
// client's binary because its start is on the path of every Domain start
// and every interactive session, and that binary's protobuf API costs the
// guest's start tens of milliseconds of package initialisation and page
// faults inside gVisor; this one links no protobuf and no network client
// (cmd/lazaret-init's TestLinksNoClientLibraries).
package sandboxinit

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"time"

	"github.com/lazaret/lazaret/pkg/guestuser"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/ocispec"

	"golang.org/x/sys/unix"
)

// Main runs the init role with the arguments after the role selector.
func Main(args []string) int {
	fs := flag.NewFlagSet("lazaret-init", flag.ContinueOnError)
	probe := fs.String("netprobe", "", "network readiness probe spec (from the Host Coordinator)")
	user := fs.String("user", "", "the profile's non-root session user NAME:UID:GID, created if missing (package guestuser)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "lazaret-init: not PID 1 of a sandbox; this role is started by Lazaret only")
		return 2
	}
	// Init's threads count against the guest's task limit, which a fork
	// bomb in the sandbox exhausts; the Go runtime dies if it then needs a
	// new thread, and the sandbox with it. One P keeps init to the threads
	// it has: nothing here needs parallelism.
	runtime.GOMAXPROCS(1)
	fmt.Println(ocispec.InitStartedLine)
	if *user != "" {
		u, err := guestuser.Parse(*user)
		if err == nil {
			_, err = guestuser.Ensure("/", u, time.Now())
		}
		if err != nil {
			// The Runtime Supervisor reports this line as the start's error.
			fmt.Println(ocispec.InitErrorPrefix + err.Error())
			return 1
		}
	}
	// /etc/hostname, /etc/hosts and /etc/resolv.conf are the generation's
	// bind mounts (never files of a persistent layer).
	if *probe != "" {
		spec, err := netprobe.DecodeSpec(*probe)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lazaret-init: %v\n", err)
			return 2
		}
		fmt.Println(netprobe.Run(context.Background(), spec).Line())
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	fmt.Println(ocispec.ReadyLine)
	// The coordinator's first-session requests (firstsession.go): the
	// socket is adopted only now, off the start's path, as nothing before
	// the ready line uses it (the start waits in the socket meanwhile).
	first := adoptFirstSession()
	requests := make(chan firstRequest, 4)
	if first != nil {
		go first.read(requests)
	}
	// From here on init only reaps, waits and serves the first session:
	// give back what the start (the user and the probe) needed. Its guest
	// memory is the host memory of the sandbox's address space for it.
	// The settle (tens of milliseconds in gVisor; the heap only, as its
	// executable's pages carry gVisor's patched system call sites: see
	// package idlemem) waits for the first session's command to have started and
	// exited, or for settleWait after the ready line or the command's
	// start, so that it neither delays the command nor its exit's report;
	// not longer: a settle much later could need a new thread while a
	// fork bomb holds every task the guest may have (see GOMAXPROCS
	// above).
	settle := time.NewTimer(settleWait)
	settled := false
	settleNow := func() {
		if !settled {
			settled = true
			settle.Stop()
			settleIdle(nil)
		}
	}
	for {
		select {
		case <-eof:
			return 0
		case <-settle.C:
			settleNow()
		case r := <-requests:
			first.handle(r)
			if r.req.Start != nil && !settled {
				settle.Reset(settleWait)
			}
		case s := <-sigs:
			if s != unix.SIGCHLD {
				return 0
			}
			reap(first.reaped)
			if first != nil && first.exited() {
				settleNow()
			}
		}
	}
}

// settleWait bounds how long the init defers its settle (see Main).
const settleWait = 100 * time.Millisecond

// settleIdle is the init's settle: never one that unmaps its executable
// (package idlemem says why).
var settleIdle = idlemem.SettleHeap

// reap collects every exited child of init (orphans reparented to it and
// the first session's command), passing each to reaped.
func reap(reaped func(pid int, ws unix.WaitStatus)) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		reaped(pid, ws)
	}
}
