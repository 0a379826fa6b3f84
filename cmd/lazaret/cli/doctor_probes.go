package cli

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/proc"
)

// realProbes observes the running machine for `lazaret doctor`. Spawning
// goes through the broker; hcPath (a binary with the wrapper role) is the
// broker's self for the pidfs probe.
func realProbes(hcPath string, roots domain.Roots, rootsErr error) hostcheck.Probes {
	p := hostcheck.Probes{
		Statfs: hostcheck.StatfsNearest,
		Domains: func() ([]hostcheck.DomainState, error) {
			if rootsErr != nil {
				return nil, rootsErr
			}
			return scanDomains(roots, os.ReadFile)
		},
	}
	spawner := func() (*proc.Broker, error) {
		if hcPath == "" {
			return nil, errors.New("lazaret-hc not found (see its check)")
		}
		return proc.NewBroker(slog.New(slog.DiscardHandler), hcPath)
	}
	p.Pidfs = func() error {
		b, err := spawner()
		if err != nil {
			return err
		}
		_, err = b.PidfsHostSupportProbe(context.Background())
		return err
	}
	p.UserNS = func() error {
		b, err := spawner()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// lazaret-hc's --help in a new user namespace: only clone matters.
		// Any exit status will do: the clone itself is the observation.
		_, _, _, err = b.Output(ctx, "userns-probe", proc.Command{Path: hcPath, Args: []string{"lazaret-hc", "--help"}, Cloneflags: unix.CLONE_NEWUSER}, 4096)
		return err
	}
	// versionOutput is the standard output of `NAME --version` run from
	// path through the broker.
	versionOutput := func(path, name string) (string, error) {
		b, err := spawner()
		if err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, stderr, st, err := b.Output(ctx, name+"-version", proc.Command{Path: path, Args: []string{name, "--version"}}, 4096)
		if err != nil {
			return "", err
		}
		if st.Code != 0 {
			return "", fmt.Errorf("%s --version: exit %d: %s", name, st.Code, strings.TrimSpace(string(stderr)))
		}
		return string(out), nil
	}
	p.RunscVersion = func(path string) (string, error) {
		v, err := moduleVersion(path)
		if err != nil || v != develVersion {
			return v, err
		}
		out, err := versionOutput(path, "runsc")
		if err != nil {
			return "", err
		}
		return parseRunscVersion(out)
	}
	p.SlirpVersion = func(path string) (string, error) {
		out, err := versionOutput(path, "slirp4netns")
		if err != nil {
			return "", err
		}
		return parseSlirpVersion(out)
	}
	return p
}

// parseSlirpVersion reads "slirp4netns version X.Y.Z" from --version output.
func parseSlirpVersion(out string) (string, error) {
	first, _, _ := strings.Cut(out, "\n")
	if v, ok := strings.CutPrefix(strings.TrimSpace(first), "slirp4netns version "); ok {
		return v, nil
	}
	return "", fmt.Errorf("unexpected --version output %q", first)
}

// develVersion is the main-module version of a Go build from a module's
// directory rather than from the module proxy.
const develVersion = "(devel)"

// moduleVersion is the main-module version a Go binary records.
func moduleVersion(path string) (string, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", err
	}
	return bi.Main.Version, nil
}

// parseRunscVersion reads "runsc version V" from runsc --version output;
// the module's own build says VERSION_MISSING there, which is no version.
func parseRunscVersion(out string) (string, error) {
	first, _, _ := strings.Cut(out, "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(first), "runsc version ")
	if !ok || v == "" || v == "VERSION_MISSING" {
		return "", fmt.Errorf("runsc --version names no version (%q)", first)
	}
	return v, nil
}

// scanDomains lists the Domains under roots without touching them: whether
// a Host Coordinator holds the lifecycle flock comes from /proc/locks
// (taking the lock, even briefly, could race a starting lazaret run).
func scanDomains(roots domain.Roots, readFile func(string) ([]byte, error)) ([]hostcheck.DomainState, error) {
	dirs, err := os.ReadDir(filepath.Join(roots.Storage, "domains"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	locks, err := readFile("/proc/locks")
	if err != nil {
		return nil, err
	}
	held := newLockTable(string(locks))
	var out []hostcheck.DomainState
	for _, d := range dirs {
		id := domain.ID(d.Name())
		if !id.Valid() {
			continue
		}
		paths, err := domain.PathsFor(roots, id)
		if err != nil {
			continue
		}
		s := hostcheck.DomainState{ID: string(id)}
		var ident domain.StoredIdentity
		if b, err := readFile(filepath.Join(paths.DomainRoot, "domain.json")); err == nil && json.Unmarshal(b, &ident) == nil {
			s.Profile, s.Workspace = ident.Profile, ident.Workspace
		}
		s.LockHeld = held.held(paths)
		if _, err := os.Stat(paths.RuntimeDir); err == nil {
			s.RuntimeLeft = true
		}
		out = append(out, s)
	}
	return out, nil
}
