package imagebuild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/proc"
	"golang.org/x/sys/unix"
)

// DebianSuite is the Debian release the "debian" kind is built from.
const DebianSuite = "bookworm"

// DebianPackages are installed on top of the minbase variant.
var DebianPackages = []string{"bash", "coreutils", "git", "ca-certificates", "curl", "python3", "less", "procps"}

func buildDebian(ctx context.Context, opts Options, log *slog.Logger) (Result, error) {
	start := time.Now()
	mode, err := mmdebstrapMode()
	if err != nil {
		return Result{}, fmt.Errorf("image build debian: %w", err)
	}
	args := []string{
		"--mode=" + mode,
		"--variant=minbase",
		"--include=" + strings.Join(DebianPackages, ","),
		DebianSuite,
		"-", // tar on stdout
	}
	log.Info("running mmdebstrap", "args", args)
	fmt.Fprintf(opts.Progress, "debian: mmdebstrap %s (this takes about a minute)\n", strings.Join(args, " "))

	mmdebstrap, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return Result{}, fmt.Errorf("image build debian: mmdebstrap not found (install Debian package mmdebstrap): %w", err)
	}
	tail := &tailWriter{max: 25}
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("image build debian: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdout.Close()
		stdoutW.Close()
		return Result{}, fmt.Errorf("image build debian: %w", err)
	}
	child, err := opts.Broker.Start("mmdebstrap", proc.Command{
		Path: mmdebstrap, Args: append([]string{"mmdebstrap"}, args...), Env: os.Environ(),
		Files: []*os.File{nil, stdoutW, stderrW},
	})
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdout.Close()
		stderrR.Close()
		return Result{}, fmt.Errorf("image build debian: start mmdebstrap (install Debian package mmdebstrap): %w", err)
	}
	defer stdout.Close()
	stderrDone := make(chan struct{})
	go func() {
		io.Copy(io.MultiWriter(opts.Progress, tail), stderrR)
		stderrR.Close()
		close(stderrDone)
	}()
	// Cancellation stops mmdebstrap through its exact pidfd; it cleans up
	// its own children on SIGTERM.
	stop := context.AfterFunc(ctx, func() { child.Signal(unix.SIGTERM) })
	defer stop()
	wait := func() error {
		st, err := child.Wait(context.Background())
		<-stderrDone
		if err != nil {
			return err
		}
		if !st.Exited || st.Code != 0 {
			return fmt.Errorf("mmdebstrap: %s", st)
		}
		return nil
	}
	// The layer reader reports mmdebstrap's exit status at EOF, so a failed
	// bootstrap never gets published.
	r := &exitCheckingReader{r: stdout, wait: wait}
	res, err := WriteLayout(ctx, opts.Dest, opts.Tag, ImageConfig{
		Cmd:        []string{"/bin/bash"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
		WorkingDir: "/",
		Created:    sourceDateEpoch(time.Now().UTC().Truncate(time.Second)),
	}, r)
	if !r.waited {
		// WriteLayout stopped before EOF: stop mmdebstrap and reap it.
		child.Signal(unix.SIGTERM)
		stdout.Close()
		wait()
	}
	if r.exitErr != nil {
		return Result{}, fmt.Errorf("image build debian: mmdebstrap --mode=%s failed: %w\n%s\n%s",
			mode, r.exitErr, indent(tail.String()), mmdebstrapHint(mode))
	}
	if err != nil {
		return Result{}, fmt.Errorf("image build debian: %w", err)
	}
	log.Info("image built", "manifest_digest", res.ManifestDigest, "mode", mode, "duration", time.Since(start))
	fmt.Fprintf(opts.Progress, "debian: published %s:%s (%s) in %s\n", res.Dest, res.Tag, res.ManifestDigest, time.Since(start).Round(time.Second))
	return res, nil
}

// mmdebstrapMode picks --mode=root for root (real chown and mknod work
// there) and --mode=unshare otherwise, after checking the prerequisites
// of the latter so the failure names its fix.
func mmdebstrapMode() (string, error) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", fmt.Errorf("mmdebstrap not found: install Debian package mmdebstrap")
	}
	if os.Geteuid() == 0 {
		return "root", nil
	}
	for _, tool := range []string{"newuidmap", "newgidmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s not found: install Debian package uidmap (mmdebstrap --mode=unshare needs it)", tool)
		}
	}
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		n, err := subordinateCount(f, u.Username, u.Uid)
		if err != nil {
			return "", err
		}
		if n < 65536 {
			return "", fmt.Errorf("%s grants user %s %d subordinate ids, mmdebstrap --mode=unshare needs 65536: "+
				"run as root `usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s` (pick a free range)",
				f, u.Username, n, u.Username)
		}
	}
	return "unshare", nil
}

// subordinateCount sums the ranges granted to name or uid in a subid file.
func subordinateCount(file, name, uid string) (int64, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || (parts[0] != name && parts[0] != uid) {
			continue
		}
		if n, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
			total += n
		}
	}
	return total, sc.Err()
}

func mmdebstrapHint(mode string) string {
	if mode == "unshare" {
		return "likely fix: make sure /etc/subuid and /etc/subgid grant this user a range of 65536 ids " +
			"(usermod --add-subuids/--add-subgids), that newuidmap/newgidmap from package uidmap are installed " +
			"and setuid, that unprivileged user namespaces are allowed (sysctl kernel.unprivileged_userns_clone, " +
			"AppArmor userns restrictions), and that apt's configured Debian mirror is reachable"
	}
	return "likely fix: make sure apt's configured Debian mirror (/etc/apt/sources.list*) is reachable and " +
		"that there is enough free space in $TMPDIR"
}

// exitCheckingReader turns the EOF of a child's stdout into the child's
// exit status.
type exitCheckingReader struct {
	r       io.Reader
	wait    func() error
	waited  bool
	exitErr error
}

func (e *exitCheckingReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF && !e.waited {
		e.waited = true
		if werr := e.wait(); werr != nil {
			e.exitErr = werr
			return n, werr
		}
	}
	return n, err
}

// tailWriter keeps the last max lines written to it.
type tailWriter struct {
	mu    sync.Mutex
	max   int
	lines []string
	part  string
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		// progress bars redraw with carriage returns; keep the last state.
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:]
		}
		t.lines = append(t.lines, l)
	}
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if t.part != "" {
		lines = append(lines[:len(lines):len(lines)], t.part)
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	if s == "" {
		return "  (mmdebstrap printed nothing on stderr)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
