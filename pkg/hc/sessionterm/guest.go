package sessionterm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
)

// identify establishes the guest leader: its launcher's /proc/self/stat
// line, reported on the identity pipe just before it execs the command
// (ocispec.IdentityArg), gives its pid, process group and start time; the
// pid must be the one runsc wrote to --internal-pid-file, and the leader
// must lead its group. A launcher that reports nothing (its command was
// not found, or the exec client failed) closes the pipe unreported.
func (t *Terminal) identify(pidFile string, ident *os.File) error {
	deadline := t.clock.Now().Add(IdentifyTimeout)
	type report struct {
		line string
		err  error
	}
	reported := make(chan report, 1)
	go func() {
		line, err := readIdentity(ident)
		reported <- report{line, err}
	}()
	var r report
	select {
	case r = <-reported:
	case <-t.clock.After(IdentifyTimeout):
		ident.SetReadDeadline(time.Now()) // ends the read
		<-reported
		return errdefs.New(errdefs.ErrUnavailable, "no guest identity within %s", IdentifyTimeout)
	}
	if r.err != nil {
		return r.err
	}
	pidField, _, _ := strings.Cut(r.line, " ")
	pid, err := strconv.Atoi(pidField)
	if err != nil || pid <= 0 {
		return errdefs.New(errdefs.ErrRefused, "the session launcher reported a malformed identity %q", r.line)
	}
	st, err := parseStat(r.line, pid)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("the session launcher's identity: %w", err), errdefs.ErrRefused)
	}
	named, err := t.guestPID(pidFile, deadline)
	if err != nil {
		return err
	}
	if named != pid {
		return errdefs.New(errdefs.ErrRefused, "the session launcher reported guest pid %d, runsc started %d", pid, named)
	}
	if st.pgrp != pid {
		return errdefs.New(errdefs.ErrRefused, "guest leader %d is in process group %d, not its own", pid, st.pgrp)
	}
	t.id.GuestLeaderPID, t.id.GuestPGID, t.id.GuestLeaderStart = pid, st.pgrp, st.start
	t.identified = true
	return nil
}

// maxIdentity bounds the launcher's report (a /proc/<pid>/stat line is a
// few hundred bytes).
const maxIdentity = 4096

// readIdentity reads the launcher's report: one line, at most maxIdentity
// bytes. End of file before a newline is no report.
func readIdentity(r io.Reader) (string, error) {
	buf := make([]byte, 0, 512)
	chunk := make([]byte, 512)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return string(buf[:i]), nil
		}
		if len(buf) > maxIdentity {
			return "", errdefs.New(errdefs.ErrRefused, "the session launcher's identity exceeds %d bytes", maxIdentity)
		}
		if err == io.EOF {
			return "", errdefs.New(errdefs.ErrUnavailable, "the session launcher reported no identity (its command did not start)")
		}
		if err != nil {
			return "", errdefs.New(errdefs.ErrUnavailable, "read the session launcher's identity: %v", err)
		}
	}
}

// guestPID waits, until deadline or the exec client's exit, for the pid
// runsc writes to --internal-pid-file once the guest process exists (the
// launcher may report before runsc has written it).
func (t *Terminal) guestPID(pidFile string, deadline time.Time) (int, error) {
	for {
		if n, ok := runsc.ReadInternalPID(pidFile); ok {
			return n, nil
		}
		if t.clock.Now().After(deadline) {
			return 0, errdefs.New(errdefs.ErrUnavailable, "no guest pid within %s", IdentifyTimeout)
		}
		select {
		case <-t.child.Done():
			// runsc writes the file before it waits for the process.
			if n, ok := runsc.ReadInternalPID(pidFile); ok {
				return n, nil
			}
			return 0, errdefs.New(errdefs.ErrUnavailable, "exec client exited before reporting the guest pid")
		case <-t.clock.After(2 * time.Millisecond):
		}
	}
}

type guestStat struct {
	pgrp  int
	start uint64
}

// parseStat parses a /proc/<pid>/stat line: the comm field may contain
// spaces and parentheses, so fields are counted after the last ')'.
func parseStat(line string, pid int) (guestStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 || !strings.HasPrefix(line, strconv.Itoa(pid)+" (") {
		return guestStat{}, fmt.Errorf("malformed stat %q", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); pgrp is field 5, starttime field 22.
	if len(f) < 20 {
		return guestStat{}, fmt.Errorf("short stat %q", line)
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return guestStat{}, fmt.Errorf("malformed stat %q", line)
	}
	return guestStat{pgrp: pgrp, start: start}, nil
}

// guestStat reads /proc/<pid>/stat inside the sandbox with a short `runsc
// exec` of cat (the guest's /proc is the only source of an exact start
// time: `runsc ps` shows it to the minute). An absent process is an error.
func (t *Terminal) guestStat(ctx context.Context, pid int) (guestStat, error) {
	d := t.d
	pj, err := ocispec.ProcessJSON(ocispec.Launch(ocispec.Process{Args: []string{"cat", fmt.Sprintf("/proc/%d/stat", pid)}, Env: d.BaseEnv, Cwd: "/", Rlimits: d.Rlimits}))
	if err != nil {
		return guestStat{}, err
	}
	f := filepath.Join(d.Dir, t.s.ID+".stat.json")
	if err := os.WriteFile(f, pj, 0o600); err != nil {
		return guestStat{}, err
	}
	defer os.Remove(f)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	argv := d.Runtime.Exec(f, "", d.Container)
	out, stderr, st, err := d.Broker.Output(ctx, "runsc_exec_stat", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/"}, 64<<10)
	if err != nil {
		return guestStat{}, fmt.Errorf("read guest stat of %d: %w", pid, err)
	}
	if st.ShellCode() != 0 {
		return guestStat{}, errdefs.New(errdefs.ErrUnavailable, "guest process %d absent (%s: %s)", pid, st.String(), strings.TrimSpace(string(stderr)))
	}
	return parseStat(strings.TrimSpace(string(out)), pid)
}

// leaderMatches reports whether the recorded guest leader still exists with
// the recorded start time and still leads the recorded group.
func (t *Terminal) leaderMatches(ctx context.Context) bool {
	st, err := t.guestStat(ctx, t.id.GuestLeaderPID)
	if err != nil {
		t.log.Debug("guest leader absent", "guest_pid", t.id.GuestLeaderPID, "err", err)
		return false
	}
	if st.start != t.id.GuestLeaderStart || st.pgrp != t.id.GuestPGID {
		t.log.Warn("guest leader mismatch: refusing the process-group signal", "guest_pid", t.id.GuestLeaderPID,
			"recorded_start", t.id.GuestLeaderStart, "start", st.start, "recorded_pgid", t.id.GuestPGID, "pgid", st.pgrp)
		return false
	}
	return true
}

// groupPresent reports whether any guest process is in the recorded group
// (from the PGID column of `runsc ps`).
func (t *Terminal) groupPresent(ctx context.Context) (bool, error) {
	d := t.d
	argv := append(append([]string{d.Runtime.Path}, d.Runtime.GlobalFlags()...), "ps", d.Container)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, stderr, st, err := d.Broker.Output(ctx, "runsc_ps", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/"}, 1<<20)
	if err != nil {
		return true, err
	}
	if st.ShellCode() != 0 {
		return true, fmt.Errorf("runsc ps: %s: %s", st.String(), strings.TrimSpace(string(stderr)))
	}
	return psHasGroup(out, t.id.GuestPGID)
}

// psHasGroup parses `runsc ps` table output (UID PID PPID PGID …).
func psHasGroup(out []byte, pgid int) (bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	col := -1
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if col < 0 {
			for i, h := range f {
				if h == "PGID" {
					col = i
				}
			}
			if col < 0 {
				return true, fmt.Errorf("runsc ps: no PGID column in %q", sc.Text())
			}
			continue
		}
		if len(f) > col && f[col] == strconv.Itoa(pgid) {
			return true, nil
		}
	}
	if col < 0 {
		return true, fmt.Errorf("runsc ps: empty output")
	}
	return false, nil
}

// signalGroup delivers sig to the recorded guest process group.
func (t *Terminal) signalGroup(sig unix.Signal) {
	t.log.Debug("guest group signal", "guest_pgid", t.id.GuestPGID, "signal", unix.SignalName(sig))
	t.runscQuiet(t.d.Runtime.KillGroup(t.d.Container, strings.TrimPrefix(unix.SignalName(sig), "SIG"), t.id.GuestPGID))
}

// runscQuiet runs a short runsc command; a failure is only logged.
func (t *Terminal) runscQuiet(argv []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, stderr, st, err := t.d.Broker.Output(ctx, "runsc", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}, 64<<10)
	if err != nil || st.ShellCode() != 0 {
		t.d.Log.Debug("runsc", "argv", strings.Join(argv[1:], " "), "status", st.String(), "err", err, "stderr", strings.TrimSpace(string(stderr)))
	}
}
