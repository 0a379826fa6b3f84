package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
)

var kernelCommand = &cli.Command{
	Name:  "kernel",
	Usage: "qualify this machine's kernel build for Lazaret, or show how it is qualified",
	Description: `Lazaret gives host processes authority only on an exactly qualified kernel
build (x86-64 Linux ≥ 6.9 with pidfs; release, uname -v and machine must all
match). A build is qualified by the list built into Lazaret or by a host
qualification record, which ` + "`lazaret kernel qualify`" + ` writes after the kernel
qualification suite passed on this machine:

   /etc/lazaret/kernels.d/                 as root: trusted for every user
   $XDG_CONFIG_HOME/lazaret/kernels.d/     as yourself: for you only

A record is refused when its file, its directory or any directory above it
can be written by anyone but root or its owner, or when it lies inside a
tree a sandbox can write.`,
	Subcommands: []*cli.Command{kernelQualifyCommand, kernelStatusCommand},
}

var kernelQualifyCommand = &cli.Command{
	Name:  "qualify",
	Usage: "run the kernel qualification suite and record the result for this build",
	Description: `Runs the suite in a child process: the pidfs host support probe with its
observations, the probe repeated 20 times, 500 consecutive processes whose
pidfs inodes must strictly increase, and the parent-death kill through both
acquisition barriers. Each step's result is printed. On success it writes a
host qualification record (release, uname -v, machine, boot ID, date, this
Lazaret's version and the suite's full output): as root to
/etc/lazaret/kernels.d (for every user), otherwise to your
$XDG_CONFIG_HOME/lazaret/kernels.d. A failed suite writes nothing and exits 1.

Examples:
   sudo lazaret kernel qualify             qualify for every user of this machine
   lazaret kernel qualify                  qualify for yourself only
   lazaret kernel qualify --if-needed      do nothing when the build is qualified`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "system", Usage: "write the system-wide record in /etc/lazaret/kernels.d (needs root; the default as root)"},
		&cli.BoolFlag{Name: "user", Usage: "write your own record in $XDG_CONFIG_HOME/lazaret/kernels.d (the default as a user)"},
		&cli.BoolFlag{Name: "if-needed", Usage: "exit 0 at once when the running build is already qualified"},
	},
	Action: func(c *cli.Context) error {
		uid := os.Geteuid()
		if c.Bool("system") && c.Bool("user") {
			return errdefs.New(errdefs.ErrInvalid, "--system and --user exclude each other")
		}
		system := uid == 0 || c.Bool("system")
		if c.Bool("user") && uid == 0 {
			return errdefs.New(errdefs.ErrInvalid, "as root, records are system-wide: run without --user (or as the developer for a per-user record)")
		}
		if system && uid != 0 {
			return errdefs.New(errdefs.ErrRefused, "--system writes %s, which only root may write: run `sudo lazaret kernel qualify`, or drop --system to qualify for yourself", hostcheck.SystemRecordPath)
		}
		dir := hostcheck.SystemRecordDir()
		if !system {
			d, ok := hostcheck.UserRecordDir(os.Getenv, uid)
			if !ok {
				return errdefs.New(errdefs.ErrInvalid, "neither XDG_CONFIG_HOME nor HOME is an absolute path: set HOME, or qualify system-wide with `sudo lazaret kernel qualify`")
			}
			dir = d
		}
		host := hostcheck.Real(nil)
		u, err := host.Uname()
		if err != nil {
			return errdefs.Mark(fmt.Errorf("uname: %w", err), errdefs.ErrUnsupportedHost)
		}
		if err := hostcheck.Floor(u); err != nil {
			return err
		}
		if c.Bool("if-needed") {
			if q, err := host.KernelQualification(); err == nil {
				fmt.Fprintf(c.App.Writer, "kernel %s %s is qualified by %s\n", u.Release, u.Version, q.Source)
				return nil
			}
		}
		rec, err := runQualificationSuite(c.Context, u, c.App.Writer)
		if err != nil {
			return err
		}
		path, err := hostcheck.WriteRecord(dir, rec)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "\nkernel %s %s %s is qualified: record written to %s\n", u.Release, u.Version, u.Machine, path)
		return nil
	},
}

// runQualificationSuite runs the suite role in a child of this binary,
// copying each line to w as it comes, and returns the record of a passed
// run (its Output is everything the run printed, header included).
func runQualificationSuite(ctx context.Context, u hostcheck.Uname, w io.Writer) (hostcheck.Record, error) {
	exe, err := os.Executable()
	if err != nil {
		return hostcheck.Record{}, err
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return hostcheck.Record{}, errdefs.Mark(fmt.Errorf("boot id: %w", err), errdefs.ErrUnsupportedHost)
	}
	now := time.Now().UTC()
	var out strings.Builder
	emit := func(l string) {
		out.WriteString(l + "\n")
		fmt.Fprintln(w, l)
	}
	emit(fmt.Sprintf("kernel qualification suite %s: %s %s %s, boot %s, Lazaret %s, %s", proc.SuiteVersion, u.Release, u.Version, u.Machine, boot, release.Version, now.Format(time.RFC3339)))
	b, err := proc.NewBroker(slog.New(slog.NewTextHandler(io.Discard, nil)), exe)
	if err != nil {
		return hostcheck.Record{}, err
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return hostcheck.Record{}, err
	}
	child, err := b.Start("kernel-suite", proc.Command{Path: exe, Args: []string{"lazaret-kernel-suite", proc.QualifySuiteArg}, Files: []*os.File{nil, pw, pw}})
	pw.Close()
	if err != nil {
		r.Close()
		return hostcheck.Record{}, fmt.Errorf("start the qualification suite: %w", err)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	last := ""
	for sc.Scan() {
		last = sc.Text()
		emit(last)
	}
	r.Close()
	st, err := child.Wait(ctx)
	if err != nil {
		return hostcheck.Record{}, err
	}
	if !st.Exited || st.Code != 0 || last != proc.SuitePassed {
		return hostcheck.Record{}, errdefs.New(errdefs.ErrUnsupportedHost, "kernel build %s %q failed the qualification suite (%s): Lazaret cannot run on it; nothing was recorded. Use a kernel that passes (x86-64 Linux ≥ 6.9 with pidfs; see docs/SUPPORT.md) and report the output above", u.Release, u.Version, st)
	}
	return hostcheck.Record{Release: u.Release, Version: u.Version, Machine: u.Machine, BootID: boot.String(), QualifiedAt: now,
		Lazaret: release.Version, Suite: proc.SuiteVersion, Output: out.String()}, nil
}

// kernelStatus is `lazaret kernel status --json`.
type kernelStatus struct {
	Release   string         `json:"release"`
	Version   string         `json:"version"`
	Machine   string         `json:"machine"`
	Qualified bool           `json:"qualified"`
	Source    string         `json:"source,omitempty"`
	Error     string         `json:"error,omitempty"`
	Records   []kernelRecord `json:"records"`
	Refused   []string       `json:"refused"`
}

type kernelRecord struct {
	Path        string    `json:"path"`
	Release     string    `json:"release"`
	Version     string    `json:"version"`
	Machine     string    `json:"machine"`
	Matches     bool      `json:"matches_running_build"`
	QualifiedAt time.Time `json:"qualified_at"`
	BootID      string    `json:"boot_id"`
	Lazaret     string    `json:"lazaret_version"`
	Suite       string    `json:"suite"`
}

var kernelStatusCommand = &cli.Command{
	Name:  "status",
	Usage: "show the running kernel build, what qualifies it, and every host qualification record",
	Description: `Exit status 0 when the running build is qualified, 1 when it is not.

Examples:
   lazaret kernel status
   lazaret kernel status --json`,
	Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output"}},
	Action: func(c *cli.Context) error {
		host := hostcheck.Real(nil)
		q, qerr := host.KernelQualification()
		set := host.Records(nil)
		u := q.Uname
		st := kernelStatus{Release: u.Release, Version: u.Version, Machine: u.Machine, Qualified: qerr == nil, Source: q.Source, Records: []kernelRecord{}, Refused: []string{}}
		if qerr != nil {
			st.Error = qerr.Error()
		}
		for _, r := range set.Records {
			st.Records = append(st.Records, kernelRecord{Path: r.Path, Release: r.Release, Version: r.Version, Machine: r.Machine, Matches: r.Uname() == u,
				QualifiedAt: r.QualifiedAt, BootID: r.BootID, Lazaret: r.Lazaret, Suite: r.Suite})
		}
		for _, e := range set.Refusals {
			st.Refused = append(st.Refused, e.Error())
		}
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(c.App.Writer, "running build  %s %s %s\n", u.Release, u.Version, u.Machine)
			if qerr == nil {
				fmt.Fprintf(c.App.Writer, "qualified by   %s\n", q.Source)
			} else {
				fmt.Fprintf(c.App.Writer, "NOT QUALIFIED  %v\n", qerr)
			}
			for _, r := range st.Records {
				mark := "other build"
				if r.Matches {
					mark = "this build"
				}
				fmt.Fprintf(c.App.Writer, "record         %s (%s: %s %s, %s, Lazaret %s)\n", r.Path, mark, r.Release, r.Version, r.QualifiedAt.Format("2006-01-02"), r.Lazaret)
			}
			for _, e := range st.Refused {
				fmt.Fprintf(c.App.Writer, "refused        %s\n", e)
			}
		}
		if qerr != nil {
			return exitError{Code: 1}
		}
		return nil
	},
}
