package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
)

var doctorCommand = &cli.Command{
	Name:  "doctor",
	Usage: "check everything Lazaret needs on this machine and print the fix for each failure",
	Description: `Exit status 0 only when every check passes.

Examples:
   lazaret doctor
   lazaret doctor --json`,
	Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output"}},
	Action: func(c *cli.Context) error {
		host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
		results := doctorChecks(host, os.Getenv)
		failed := 0
		for _, r := range results {
			if !r.OK {
				failed++
			}
		}
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			if err := enc.Encode(results); err != nil {
				return err
			}
		} else {
			for _, r := range results {
				mark := "ok  "
				if !r.OK {
					mark = "FAIL"
				}
				fmt.Fprintf(c.App.Writer, "%s %-22s %s\n", mark, r.Check, r.Detail)
			}
		}
		if failed > 0 {
			if !c.Bool("json") {
				fmt.Fprintf(c.App.Writer, "\n%d check(s) failed: apply the fix printed with each (or run `make setup` in the Lazaret checkout as root)\n", failed)
			}
			return exitError{1}
		}
		return nil
	},
}

// doctorResult is one check's outcome; Detail is the remedy on failure.
type doctorResult struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// doctorChecks runs every host check independently (unlike Host.All, which
// stops at the first failure), so one report lists every problem.
func doctorChecks(h hostcheck.Host, getenv func(string) string) []doctorResult {
	var out []doctorResult
	add := func(name string, err error, okDetail string) {
		if err != nil {
			out = append(out, doctorResult{Check: name, Detail: err.Error()})
			return
		}
		out = append(out, doctorResult{Check: name, OK: true, Detail: okDetail})
	}
	add("not root", h.NotRoot(), "running as an unprivileged user")
	add("kernel", h.Kernel(), "x86-64, Linux ≥ 6.9, qualified build")
	uids, gids, err := h.SubIDs()
	add("subordinate ids", err, fmt.Sprintf("uids %d+%d, gids %d+%d", uids.Start, uids.Count, gids.Start, gids.Count))
	nu, ng, err := h.IDMapTools()
	add("newuidmap/newgidmap", err, nu+", "+ng)
	add("/dev/net/tun", h.Tun(), "usable")
	if err := h.OpenRW("/dev/fuse"); err != nil {
		add("/dev/fuse", errdefs.New(errdefs.ErrUnsupportedHost, "/dev/fuse is not usable by you (%v): as root run `chmod 0666 /dev/fuse`", err), "")
	} else {
		add("/dev/fuse", nil, "usable")
	}
	runscPath, err := locate.Find(locate.Runsc, getenv)
	add("runsc", err, runscPath)
	for _, b := range []string{locate.HC, locate.RS, locate.Escalate} {
		p, err := locate.Find(b, getenv)
		add(b, err, p)
	}
	if p, err := exec.LookPath("slirp4netns"); err != nil {
		add("slirp4netns", errdefs.New(errdefs.ErrUnsupportedHost, "slirp4netns not found: as root run `apt-get install slirp4netns`"), "")
	} else {
		add("slirp4netns", nil, p)
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		add("mmdebstrap", errdefs.New(errdefs.ErrUnsupportedHost, "mmdebstrap not found (needed by `lazaret image build debian`): as root run `apt-get install mmdebstrap`"), "")
	} else {
		add("mmdebstrap", nil, "present")
	}
	if data, err := imagesDir(); err == nil {
		for _, img := range []string{"debian", "busybox"} {
			if _, err := os.Stat(data + "/" + img + "/index.json"); err != nil {
				add("image "+img, errdefs.New(errdefs.ErrUnsupportedHost, "image %q not built: run `lazaret image build %s`", img, img), "")
			} else {
				add("image "+img, nil, data+"/"+img)
			}
		}
	}
	return out
}

// doctorFailures lists the failed checks' names (tests).
func doctorFailures(rs []doctorResult) string {
	var f []string
	for _, r := range rs {
		if !r.OK {
			f = append(f, r.Check)
		}
	}
	return strings.Join(f, ",")
}
