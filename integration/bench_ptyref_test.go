//go:build lazaret_bench

package integration

// The PTY reference: what the prescribed terminal path costs on this
// machine without any of Lazaret's own code. A gVisor guest's `cat` writes
// to a host PTY (a bare `runsc exec` with terminal: true, as Lazaret's
// sessions do); a minimal relay process takes everything that PTY's
// master has at each wake-up (relayGather) and hands it over a unix
// socket to a second minimal process, which writes it to the outer
// terminal, the same PTY the harness reads for the host and Lazaret runs.
// That is the spec's shape (Host Coordinator owns the session PTY, the
// client CLI relays to the user's terminal) with nothing else: no
// framing, no TLS, no event loop, system calls entered raw. `make bench`
// runs it beside the host and Lazaret runs, so Lazaret's throughput can
// be read against what the architecture itself costs here
// (package hc's doc, "Terminals"). The sandbox runs as root, not
// rootless: the bytes take the same path (the sentry writes to the host
// PTY slave it was handed).

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pty"
	"github.com/lazaret/lazaret/pkg/rawio"
)

// ptyRelayEnv selects the role the test binary plays when the PTY
// reference re-executes it: "client" (on the outer terminal) or
// "coordinator" (owns the inner PTY, runs the rest of its arguments on it).
const ptyRelayEnv = "LAZARET_BENCH_PTY_RELAY"

func init() {
	switch os.Getenv(ptyRelayEnv) {
	case "client":
		os.Exit(ptyRelayClient(os.Args[1:]))
	case "coordinator":
		os.Exit(ptyRelayCoordinator(os.Args[1:]))
	}
}

// The relay's system calls are entered raw (rawio.ReadRaw, rawio.WriteRaw,
// rawPoll): without the Go runtime's system-call bookkeeping, whose
// wake-ups of the runtime's monitor thread cost a blocking relay ~10 %
// here, so the reference costs about what the same loop written in C did
// by hand. The relay processes do nothing else and allocate nothing in
// the loop, so no garbage collection waits for a thread blocked in the
// kernel.
func rawPoll(fd int) error {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	_, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, 0, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// writeAll writes b to dst with blocking write(2).
func writeAll(dst int, b []byte) error {
	for len(b) > 0 {
		w, err := rawio.WriteRaw(dst, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		b = b[w:]
	}
	return nil
}

// relayCopy copies src to dst with blocking read(2)/write(2) until src
// reports end of file or EIO (a PTY master whose slaves are all closed).
func relayCopy(dst, src int) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := rawio.ReadRaw(src, buf)
		if err == unix.EINTR {
			continue
		}
		if n <= 0 {
			if err == unix.EIO || err == nil {
				return nil
			}
			return fmt.Errorf("read: %w", err)
		}
		if err := writeAll(dst, buf[:n]); err != nil {
			return err
		}
	}
}

// relayGather copies a PTY master to dst the way a relay that wakes as
// rarely as possible does: wait for output (poll), take everything the
// line discipline has (non-blocking reads of at most 4 KiB each until it
// has no more), send it in one write; until EIO (every slave closed).
func relayGather(dst, master int) error {
	if err := unix.SetNonblock(master, true); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		if err := rawPoll(master); err != nil && err != unix.EINTR {
			return fmt.Errorf("poll: %w", err)
		}
		n, done := 0, false
		for n < len(buf)-4096 {
			k, err := rawio.ReadRaw(master, buf[n:])
			if k > 0 {
				n += k
				continue
			}
			if err == unix.EAGAIN || err == unix.EINTR {
				break
			}
			done = true // EIO: every slave closed (or end of file)
			break
		}
		if err := writeAll(dst, buf[:n]); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// ptyRelayClient puts its terminal (stdin/stdout) in raw mode, starts the
// coordinator role with one end of a socket pair as its fd 3 and copies the
// socket to stdout until the coordinator closes it.
func ptyRelayClient(argv []string) int {
	saved, err := unix.IoctlGetTermios(0, unix.TCGETS)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pty relay client: terminal:", err)
		return 1
	}
	if err := pty.MakeRaw(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "pty relay client: raw mode:", err)
		return 1
	}
	defer unix.IoctlSetTermios(0, unix.TCSETS, saved)
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pty relay client: socketpair:", err)
		return 1
	}
	peer := os.NewFile(uintptr(sv[1]), "relay")
	c := exec.Command("/proc/self/exe", argv...)
	c.Env = append(os.Environ(), ptyRelayEnv+"=coordinator")
	c.ExtraFiles = []*os.File{peer}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "pty relay client: start coordinator:", err)
		return 1
	}
	peer.Close()
	rerr := relayCopy(1, sv[0])
	unix.Close(sv[0])
	werr := c.Wait()
	if rerr != nil || werr != nil {
		fmt.Fprintln(os.Stderr, "pty relay client:", rerr, werr)
		return 1
	}
	return 0
}

// ptyRelayCoordinator runs argv on a fresh PTY (its session's controlling
// terminal) and copies the master to fd 3 until every slave is closed.
func ptyRelayCoordinator(argv []string) int {
	// A blocking master, out of the Go poller (pty.Open's is driven by it).
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pty relay coordinator:", err)
		return 1
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		fmt.Fprintln(os.Stderr, "pty relay coordinator: TIOCSPTLCK:", err)
		return 1
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		fmt.Fprintln(os.Stderr, "pty relay coordinator: TIOCGPTPEER:", errno)
		return 1
	}
	slave := os.NewFile(sfd, "pts")
	if err := pty.SetSize(slave, ptyTestSize); err != nil {
		fmt.Fprintln(os.Stderr, "pty relay coordinator:", err)
		return 1
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "pty relay coordinator: start:", err)
		return 1
	}
	slave.Close()
	rerr := relayGather(3, mfd)
	unix.Close(3)
	werr := c.Wait()
	if rerr != nil || werr != nil {
		fmt.Fprintln(os.Stderr, "pty relay coordinator:", rerr, werr)
		return 1
	}
	return 0
}

// ptyReference is a bare gVisor sandbox over the tiny profile's prepared
// (busybox) lower with the workspace at /workspace, run by the harness
// (root) with Lazaret's runsc flags; argv returns the reference's command line
// for one session running script.
type ptyReference struct {
	runsc, root, bundle, id string
}

func startPTYReference(t *testing.T, e *env, ws string) *ptyReference {
	t.Helper()
	arts, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "prepared", "pl-*", "rootfs"))
	var rootfs string
	for _, a := range arts {
		if _, err := os.Stat(filepath.Join(a, "bin", "busybox")); err == nil {
			rootfs = a
		}
	}
	if rootfs == "" {
		t.Fatalf("no prepared busybox lower among %v", arts)
	}
	dir := t.TempDir()
	f := &ptyReference{runsc: e.runsc, root: filepath.Join(dir, "state"), bundle: dir, id: "pty-reference-" + randHex(3)}
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process":    map[string]any{"args": []string{"/bin/sleep", "3600"}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/bin"}},
		"root":       map[string]any{"path": rootfs, "readonly": true},
		"linux":      map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
		"mounts": []map[string]any{{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/workspace", "type": "bind", "source": ws, "options": []string{"rbind", "ro"}}},
	}
	js, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, verb := range [][]string{{"create", "--bundle", dir, f.id}, {"start", f.id}} {
		// Output to a file: the sandbox inherits it, so a pipe would
		// never reach end of file.
		log := filepath.Join(dir, "runsc-"+verb[0]+".log")
		out, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		c := exec.Command(f.runsc, append(f.flags(), verb...)...)
		c.Stdout, c.Stderr = out, out
		err = c.Run()
		out.Close()
		if err != nil {
			msg, _ := os.ReadFile(log)
			f.stop()
			t.Fatalf("PTY reference sandbox: runsc %s: %v\n%s", verb[0], err, msg)
		}
	}
	t.Cleanup(f.stop)
	return f
}

// flags are Lazaret's runsc flags (pkg/runsc) without its network.
func (f *ptyReference) flags() []string {
	return []string{"--root=" + f.root, "--ignore-cgroups", "--network=none", "--overlay2=root:memory", "--file-access-mounts=shared"}
}

func (f *ptyReference) stop() {
	exec.Command(f.runsc, append(f.flags(), "kill", f.id, "KILL")...).Run()
	exec.Command(f.runsc, append(f.flags(), "delete", "-force", f.id)...).Run()
	// runsc --network=none as root binds an empty network namespace into
	// its root directory and leaves it there.
	netns := filepath.Join(f.root, "null-netns")
	unix.Unmount(netns, unix.MNT_DETACH)
	os.Remove(netns)
}

// execArgv is a non-detached `runsc exec` of script with terminal: true,
// on the caller's terminal.
func (f *ptyReference) execArgv(t *testing.T, script string) []string {
	t.Helper()
	proc := map[string]any{"terminal": true, "args": []string{"/bin/sh", "-c", script}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/bin", "TERM=xterm"}}
	js, _ := json.Marshal(proc)
	p := filepath.Join(f.bundle, "process-"+randHex(3)+".json")
	if err := os.WriteFile(p, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return append([]string{f.runsc}, append(f.flags(), "exec", "--process", p, f.id)...)
}

// argv is the command line of one reference session (with env): the relay
// client, whose coordinator runs execArgv on its own PTY.
func (f *ptyReference) argv(t *testing.T, script string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{self}, f.execArgv(t, script)...)
}

// env is the environment that makes the test binary the relay client.
func (f *ptyReference) env() []string { return []string{ptyRelayEnv + "=client"} }
