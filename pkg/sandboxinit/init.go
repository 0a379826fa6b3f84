// Package sandboxinit is the Agent Sandbox's init process (PID 1 of the
// guest): the root process of the attached `runsc run`. It writes the
// generation's /etc/hostname and /etc/hosts into the ephemeral root overlay,
// reports readiness on its stdout (a pipe read by the Runtime Supervisor),
// reaps orphaned guest processes, and exits when its stdin (held by the
// Runtime Supervisor) reaches EOF — which ends the container and every guest
// process in it. It is terminal-neutral: sessions attach with `runsc exec`.
//
// It runs inside gVisor, never on the host, and is linked into the
// lazaret-escalate binary (the one Lazaret binary mounted into the sandbox).
package sandboxinit

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/lazaret/lazaret/pkg/ocispec"

	"golang.org/x/sys/unix"
)

// Main runs the init role with the arguments after the role selector.
func Main(args []string) int {
	fs := flag.NewFlagSet("lazaret-init", flag.ContinueOnError)
	hostname := fs.String("hostname", "lazaret", "guest host name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "lazaret-init: not PID 1 of a sandbox; this role is started by Lazaret only")
		return 2
	}
	if err := writeHostFiles(*hostname); err != nil {
		fmt.Fprintf(os.Stderr, "lazaret-init: %v\n", err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	fmt.Println(ocispec.ReadyLine)
	for {
		select {
		case <-eof:
			return 0
		case s := <-sigs:
			if s != unix.SIGCHLD {
				return 0
			}
			reap()
		}
	}
}

// reap collects every exited orphan reparented to init.
func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

func writeHostFiles(hostname string) error {
	if strings.ContainsAny(hostname, " \t\n/") || hostname == "" {
		return fmt.Errorf("bad hostname %q", hostname)
	}
	if err := os.WriteFile("/etc/hostname", []byte(hostname+"\n"), 0o644); err != nil {
		return err
	}
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n", hostname)
	return os.WriteFile("/etc/hosts", []byte(hosts), 0o644)
}
