package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/runsc"
)

var doctorCommand = &cli.Command{
	Name:  "doctor",
	Usage: "check everything Lazaret needs on this machine and print the fix for each failure",
	Description: `Checks: not root; x86-64 Linux ≥ 6.9 on a qualified build; the pidfs host
support probe; subordinate uid/gid ranges; newuidmap/newgidmap (setuid or
file capabilities); /dev/net/tun and /dev/fuse; Lazaret's programs and the
pinned runsc; unprivileged user namespaces (including Ubuntu 24.04's AppArmor
restriction); the distribution (the fixes name its packages); slirp4netns;
mmdebstrap; the Storage Root and runtime root filesystems and free space;
Domains a crash left needing recovery; the built images.
Exit status 0 only when every check passes.

Examples:
   lazaret doctor
   lazaret doctor --json`,
	Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "machine-readable output"}},
	Action: func(c *cli.Context) error {
		programs, cfgErr := configuredPrograms()
		getenv := programGetenv(programs, os.Getenv)
		find := func(n string) (string, error) { return locate.Find(n, getenv) }
		host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
		hcPath, _ := find(locate.HC)
		roots, rootsErr := domain.DefaultRoots(os.Getenv, os.Getuid())
		results := doctorChecks(host, realProbes(hcPath, roots, rootsErr), find, roots, rootsErr)
		cfg := doctorResult{Check: "configuration", OK: true, Detail: "valid (or none: built-in profiles)"}
		if cfgErr != nil {
			cfg = doctorResult{Check: "configuration", Detail: cfgErr.Error() + " (run `lazaret config check` for every problem)"}
		}
		results = append([]doctorResult{cfg}, results...)
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
			return exitError{Code: 1}
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
// stops at the first failure), so one report lists every problem. find
// locates a program (locate.Find in production).
func doctorChecks(h hostcheck.Host, p hostcheck.Probes, find func(string) (string, error), roots domain.Roots, rootsErr error) []doctorResult {
	var out []doctorResult
	add := func(name string, err error, okDetail string) {
		if err != nil {
			out = append(out, doctorResult{Check: name, Detail: err.Error()})
			return
		}
		out = append(out, doctorResult{Check: name, OK: true, Detail: okDetail})
	}
	add("not root", h.NotRoot(), "running as an unprivileged user")
	q, qerr := h.KernelQualification()
	add("kernel", qerr, q.Describe())
	add("pidfs probe", h.PidfsProbe(p), hostcheck.ProbeVersionNote)
	uids, gids, err := h.SubIDs()
	add("subordinate ids", err, fmt.Sprintf("uids %d+%d, gids %d+%d", uids.Start, uids.Count, gids.Start, gids.Count))
	nu, ng, err := h.IDMapTools()
	add("newuidmap/newgidmap", err, nu+", "+ng+" (setuid or file capabilities)")
	add("/dev/net/tun", h.Tun(), "usable")
	if err := h.OpenRW("/dev/fuse"); err != nil {
		add("/dev/fuse", errdefs.New(errdefs.ErrUnsupportedHost, "/dev/fuse is not usable by you (%v): as root run `chmod 0666 /dev/fuse` (and `modprobe fuse` if it is missing)", err), "")
	} else {
		add("/dev/fuse", nil, "usable")
	}
	programs := map[string]string{}
	for _, b := range []string{locate.HC, locate.RS, locate.GitRoute, locate.Escalate, locate.Init, locate.Runsc} {
		path, err := find(b)
		programs[b] = path
		if b != locate.Runsc {
			add(b, err, path)
		} else if err != nil {
			add("runsc", err, "")
		} else {
			v, err := h.Runsc(p, path, runsc.PinnedVersion)
			add("runsc", err, path+" (gVisor "+v+")")
		}
	}
	var userns []string
	if exe, err := os.Executable(); err == nil {
		userns = append(userns, exe)
	}
	for _, b := range []string{locate.HC, locate.RS, locate.Runsc} {
		if programs[b] != "" {
			userns = append(userns, programs[b])
		}
	}
	add("user namespaces", h.UserNamespaces(p, userns), "unprivileged user namespaces work")
	distro := h.Distro()
	add("distribution", nil, distroDetail(distro))
	if path, err := find("slirp4netns"); err != nil {
		add("slirp4netns", errdefs.New(errdefs.ErrUnsupportedHost, "slirp4netns not found: %s", distro.InstallHint("slirp4netns")), "")
	} else {
		v, err := h.Slirp(p, path)
		add("slirp4netns", err, path+" "+v)
	}
	if _, err := find("mmdebstrap"); err != nil && distro.Lacks("mmdebstrap") {
		// Informational, like the busybox image: nothing to install here.
		add("mmdebstrap", nil, "not found; "+distro.InstallHint("mmdebstrap"))
	} else if err != nil {
		add("mmdebstrap", errdefs.New(errdefs.ErrUnsupportedHost, "mmdebstrap not found (needed by `lazaret image build debian`): %s", distro.InstallHint("mmdebstrap")), "")
	} else {
		add("mmdebstrap", nil, "present")
	}
	if rootsErr != nil {
		add("storage root", rootsErr, "")
	} else {
		dir := func(name, role, path string, min uint64, env string) {
			err := h.Dir(p, role, path, min, env)
			detail := path
			if err == nil {
				if fs, e := p.Statfs(path); e == nil {
					detail = fmt.Sprintf("%s (%s, %d MiB free)", path, hostcheck.FSTypeName(fs.Type), fs.FreeBytes>>20)
				}
			}
			add(name, err, detail)
		}
		dir("storage root", "Storage Root", roots.Storage, hostcheck.MinStorageFree, "XDG_STATE_HOME")
		dir("runtime root", "runtime root", roots.Runtime, hostcheck.MinRuntimeFree, "XDG_RUNTIME_DIR")
		n, err := h.StaleDomains(p)
		add("domains", err, fmt.Sprintf("%d Domain(s), none needs recovery", n))
	}
	if data, err := imagesDir(); err == nil {
		if _, err := h.Stat(data + "/debian/index.json"); err != nil {
			add("image debian", errdefs.New(errdefs.ErrUnsupportedHost, "image \"debian\" (the default profile's) not built: run `lazaret image build debian`"), "")
		} else {
			add("image debian", nil, data+"/debian")
		}
		// busybox serves only the built-in tiny profile: informational.
		if _, err := h.Stat(data + "/busybox/index.json"); err != nil {
			add("image busybox", nil, "not built; only the tiny profile uses it (`lazaret image build busybox`)")
		} else {
			add("image busybox", nil, data+"/busybox")
		}
	}
	return out
}

// distroDetail describes the detected distribution, whose package names
// the remedies use.
func distroDetail(d hostcheck.Distro) string {
	if d.Manager == "" {
		return "not recognised from /etc/os-release (remedies list each distribution's package; the table is pkg/hostcheck/packages.tsv)"
	}
	return fmt.Sprintf("%s (%s): remedies name its packages", d.Name, d.Manager)
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
