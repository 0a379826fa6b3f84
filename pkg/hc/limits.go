package hc

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/proc"
)

// hostMemTotal reads MemTotal from a meminfo file, in bytes (0 when it
// cannot be read: the memory limit then takes its fixed fallback).
func hostMemTotal(path string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil || kb > 1<<44 {
			return 0
		}
		return kb << 10
	}
	return 0
}

// runscStats is the part of `runsc events --stats` Lazaret reads: the
// sentry's own accounting, which needs no cgroup.
type runscStats struct {
	Data struct {
		Memory struct {
			Usage struct {
				Usage uint64 `json:"usage"`
			} `json:"usage"`
		} `json:"memory"`
		Pids struct {
			Current uint64 `json:"current"`
		} `json:"pids"`
	} `json:"data"`
}

func parseRunscStats(b []byte) (memory, tasks uint64, err error) {
	var st runscStats
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, 0, err
	}
	return st.Data.Memory.Usage.Usage, st.Data.Pids.Current, nil
}

// limitsStatus is the `limits` entry of the status document: each limit
// and, while the sandbox runs, its use (memory and guest tasks as the
// sentry accounts them).
func (c *coordinator) limitsStatus() *lv1.LimitsStatus {
	c.mu.Lock()
	lim, container, running := c.cfg.limits, c.sb.Container(), c.st == stateRunning
	c.mu.Unlock()
	mem := &lv1.MemoryStatus{LimitBytes: proto.Uint64(lim.Memory)}
	procs := &lv1.ProcessesStatus{Limit: proto.Uint64(lim.Processes)}
	doc := &lv1.LimitsStatus{Memory: mem, Processes: procs, OpenFiles: &lv1.OpenFilesStatus{Limit: proto.Uint64(lim.OpenFiles)}}
	if !running || container == "" {
		return doc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	argv := append(append([]string{c.sb.Runtime().Path}, c.sb.Runtime().GlobalFlags()...), "events", "--stats", container)
	out, stderr, st, err := c.broker.Output(ctx, "runsc_events", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/"}, 1<<20)
	if err == nil && st.ShellCode() != 0 {
		err = errdefs.New(errdefs.ErrUnavailable, "runsc events: %s: %s", st.String(), strings.TrimSpace(string(stderr)))
	}
	var used, tasks uint64
	if err == nil {
		used, tasks, err = parseRunscStats(out)
	}
	if err != nil {
		doc.Error = proto.String("usage unavailable: " + err.Error())
		return doc
	}
	mem.UsedBytes, procs.Tasks = proto.Uint64(used), proto.Uint64(tasks)
	return doc
}

// sandboxStopNote is what a session whose command ended with status code
// (or signal sig) is told when that end was the sandbox stopping under it
// (a limit, a crash): the reason as failureNote's line, and the status to
// report — the command killed with its sandbox. ok is false when the end
// was the command's own, or `lazaret stop`'s (stopped).
func (c *coordinator) sandboxStopNote(code, sig int, stopped bool) (note string, newCode, newSig int, ok bool) {
	if stopped || (sig != int(unix.SIGKILL) && code != 128+int(unix.SIGKILL) && code != runscExecFailed) {
		return "", code, sig, false
	}
	// SIGKILLed, or runsc exec lost the sandbox before it could read the
	// command's status.
	if note = c.failureNote(time.Second); note == "" {
		return "", code, sig, false
	}
	return note, 128 + int(unix.SIGKILL), int(unix.SIGKILL), true
}

// failureNote waits up to wait for the generation to be marked failed
// (a Runtime Supervisor's report, such as the memory limit's kill, can
// arrive just after a session's runsc exec saw its process die) and
// returns the reason as a line for the session's standard error, or "".
func (c *coordinator) failureNote(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		c.mu.Lock()
		err := c.failErr // kept once set, also while the generation tears down
		c.mu.Unlock()
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "the sandbox stopped") {
				msg = "the sandbox stopped: " + msg
			}
			return "lazaret: " + msg + "\n"
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
}
