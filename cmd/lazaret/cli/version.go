package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/release"
	"github.com/lazaret/lazaret/pkg/runsc"
)

var versionCommand = &cli.Command{
	Name:  "version",
	Usage: "print the versions of all six Lazaret binaries, runsc and the control protocol",
	Description: `Each helper binary is found as lazaret run finds it (README,
"Install") and asked for its own version, so a mismatched
installation shows. Exit status 1 when a binary is missing or unreadable.

Examples:
   lazaret version
   lazaret version --json`,
	Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output"}},
	Action: func(c *cli.Context) error {
		programs, _ := configuredPrograms() // an invalid configuration only loses its [programs]
		getenv := programGetenv(programs, os.Getenv)
		rep := versionReport(func(n string) (string, error) { return locate.Find(n, getenv) })
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
		} else {
			for _, b := range rep.Binaries {
				switch {
				case b.Error != "":
					fmt.Fprintf(c.App.Writer, "%-17s ERROR %s\n", b.Name, b.Error)
				case b.Path != "":
					fmt.Fprintf(c.App.Writer, "%-17s %s (%s)\n", b.Name, b.Version, b.Path)
				default:
					fmt.Fprintf(c.App.Writer, "%-17s %s\n", b.Name, b.Version)
				}
			}
			if rep.Runsc.Error != "" {
				fmt.Fprintf(c.App.Writer, "%-17s ERROR %s (pinned %s)\n", "runsc (gVisor)", rep.Runsc.Error, rep.PinnedRunsc)
			} else {
				fmt.Fprintf(c.App.Writer, "%-17s %s (pinned %s; %s)\n", "runsc (gVisor)", rep.Runsc.Version, rep.PinnedRunsc, rep.Runsc.Path)
			}
			fmt.Fprintf(c.App.Writer, "%-17s %d\n", "control protocol", rep.Protocol)
		}
		if !rep.ok() {
			return errdefs.New(errdefs.ErrUnsupportedHost, "some binaries are missing or unreadable (above): reinstall Lazaret (`make install`), and run `lazaret doctor` for the fix of each")
		}
		return nil
	},
}

type binaryVersion struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	Error   string `json:"error,omitempty"`
}

type versionDoc struct {
	Binaries    []binaryVersion `json:"binaries"`
	Runsc       binaryVersion   `json:"runsc"`
	PinnedRunsc string          `json:"pinned_runsc"`
	Protocol    int32           `json:"control_protocol"`
}

func (d versionDoc) ok() bool {
	for _, b := range append(d.Binaries, d.Runsc) {
		if b.Error != "" {
			return false
		}
	}
	return true
}

// versionReport asks the lazaret front that handed this command line over
// and each helper binary for its stamped version (through the broker, with
// release.VersionArg), reports its own (lazaret-cli) and reads runsc's
// gVisor module version from its Go build information.
func versionReport(find func(string) (string, error)) versionDoc {
	d := versionDoc{
		PinnedRunsc: runsc.PinnedVersion,
		Protocol:    int32(lv1.ProtocolVersion_PROTOCOL_VERSION_1),
	}
	self := binaryVersion{Name: locate.CLI, Version: release.Version}
	if exe, err := os.Executable(); err == nil {
		self.Path = exe
	}
	names := []string{locate.HC, locate.RS, locate.GitRoute, locate.Escalate, locate.Init}
	if front != "" {
		names = append([]string{"lazaret"}, names...)
	} else {
		// Run directly, not through the front: no front to ask.
		d.Binaries = append(d.Binaries, binaryVersion{Name: "lazaret", Version: release.Version})
	}
	var broker *proc.Broker
	for _, name := range names {
		if name == locate.HC {
			d.Binaries = append(d.Binaries, self)
		}
		b := binaryVersion{Name: name}
		path, err := find(name)
		if name == "lazaret" {
			path, err = front, nil
		}
		if err != nil {
			b.Error = err.Error()
			d.Binaries = append(d.Binaries, b)
			continue
		}
		b.Path = path
		if broker == nil {
			if broker, err = proc.NewBroker(slog.New(slog.DiscardHandler), path); err != nil {
				b.Error = err.Error()
				d.Binaries = append(d.Binaries, b)
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _, st, err := broker.Output(ctx, name+"-version", proc.Command{Path: path, Args: []string{name, release.VersionArg}}, 4096)
		cancel()
		switch {
		case err != nil:
			b.Error = err.Error()
		case st.Code != 0 || !st.Exited:
			b.Error = fmt.Sprintf("%s %s exited with %d: it predates version reporting or is not a Lazaret %s", path, release.VersionArg, st.ShellCode(), name)
		default:
			if b.Version, err = release.ParseLine(string(out), name); err != nil {
				b.Error = err.Error()
			}
		}
		d.Binaries = append(d.Binaries, b)
	}
	d.Runsc = binaryVersion{Name: "runsc"}
	if path, err := find(locate.Runsc); err != nil {
		d.Runsc.Error = err.Error()
	} else if v, err := moduleVersion(path); err != nil {
		d.Runsc.Path, d.Runsc.Error = path, fmt.Sprintf("read the build information of %s: %v", path, err)
	} else {
		d.Runsc.Path, d.Runsc.Version = path, v
	}
	return d
}
