package sessionterm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/proc"
)

// identify reads the guest leader pid from --internal-pid-file and the
// leader's process group and start time from the guest's /proc/<pid>/stat,
// and checks that the leader leads its group.
func (t *Terminal) identify(ctx context.Context, pidFile string) error {
	deadline := t.clock.Now().Add(IdentifyTimeout)
	pid := 0
	for {
		if b, err := os.ReadFile(pidFile); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				pid = n
				break
			}
		}
		select {
		case <-t.child.Done():
			return errdefs.New(errdefs.ErrUnavailable, "exec client exited before reporting the guest pid")
		case <-t.clock.After(10 * time.Millisecond):
		}
		if t.clock.Now().After(deadline) {
			return errdefs.New(errdefs.ErrUnavailable, "no guest pid within %s", IdentifyTimeout)
		}
	}
	st, err := t.guestStat(ctx, pid)
	if err != nil {
		return err
	}
	if st.pgrp != pid {
		return errdefs.New(errdefs.ErrRefused, "guest leader %d is in process group %d, not its own", pid, st.pgrp)
	}
	t.id.GuestLeaderPID, t.id.GuestPGID, t.id.GuestLeaderStart = pid, st.pgrp, st.start
	t.identified = true
	return nil
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
