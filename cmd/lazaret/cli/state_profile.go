package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/profilestate"
	"github.com/lazaret/lazaret/pkg/recipe"
	"github.com/lazaret/lazaret/pkg/statemaint"
)

// profileResetFailpoint is hit (failpoint builds) once a profile path
// reset has moved its entries into the trash, before their deletion.
const profileResetFailpoint = "lazaret:profile-reset:moved"

// profilePathView is one profile path in `state list`.
type profilePathView struct {
	GuestPath  string `json:"guest_path"`
	Stored     bool   `json:"stored"`
	Configured bool   `json:"configured"`
	// Bytes and Files are the stored directory's size (SizeKnown false
	// when it could not be measured in your user namespace).
	Bytes     int64 `json:"bytes"`
	Files     int64 `json:"files"`
	SizeKnown bool  `json:"size_known"`
}

// profilePathViews lists the profile's configured and stored profile
// paths with their sizes, measured in your user namespace (the files
// belong to the session user's guest id). A measuring failure is returned
// with the views (sizes unknown).
func profilePathViews(c *cli.Context, rd resolvedDomain) ([]profilePathView, error) {
	stored, err := profilestate.List(rd.paths.StorageRoot, rd.prof.Name)
	if err != nil {
		return nil, err
	}
	by := map[string]*profilePathView{}
	for _, g := range rd.prof.Config.ProfilePaths {
		by[g] = &profilePathView{GuestPath: g, Configured: true}
	}
	for _, g := range stored {
		if by[g] == nil {
			by[g] = &profilePathView{GuestPath: g}
		}
		by[g].Stored = true
	}
	var serr error
	if len(stored) > 0 {
		var us []profilestate.Usage
		rsPath, err := rmHelper()
		if err == nil {
			us, err = statemaint.ProfileSizes(c.Context, rsPath, rd.paths.StorageRoot, rd.prof.Name)
		}
		serr = err
		for _, u := range us {
			if v := by[u.GuestPath]; v != nil {
				v.Bytes, v.Files, v.SizeKnown = u.Bytes, u.Files, true
			}
		}
	}
	var out []profilePathView
	for _, v := range by {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GuestPath < out[j].GuestPath })
	return out, serr
}

// printProfilePaths is the text section of `state list` for them.
func printProfilePaths(w io.Writer, rd resolvedDomain, views []profilePathView, sizeErr error) error {
	if len(views) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nProfile paths of profile %s (shared by every workspace of the profile):\n", rd.prof.Name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tSIZE\tCONFIGURED")
	for _, v := range views {
		size := "not created yet"
		switch {
		case v.Stored && v.SizeKnown:
			noun := "entries"
			if v.Files == 1 {
				noun = "entry"
			}
			size = fmt.Sprintf("%s, %d %s", recipe.Size(v.Bytes), v.Files, noun)
		case v.Stored:
			size = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\n", v.GuestPath, size, v.Configured)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if sizeErr != nil {
		fmt.Fprintf(w, "(sizes unknown: measuring them in your user namespace failed: %v)\n", sizeErr)
	}
	return nil
}

// profilePathOf resolves a reset argument to one of the profile's
// configured or stored profile paths: an absolute guest path, or "~/…"
// for the session user's home (quoted, so that your shell does not expand
// it to your own home). ok is false when arg is none of them.
func profilePathOf(rd resolvedDomain, arg string, stored []string) (string, bool) {
	g := arg
	if g == "~" || strings.HasPrefix(g, "~/") {
		g = path.Join(rd.prof.Config.SessionUser().Home, strings.TrimPrefix(g, "~"))
	}
	for _, p := range append(append([]string{}, rd.prof.Config.ProfilePaths...), stored...) {
		if p == g {
			return g, true
		}
	}
	return "", false
}

// resetProfilePaths discards the profile's stored directories at scope:
// the profile's lock taken exclusively (no sandbox of the profile runs in
// any workspace), scope shown and confirmed, each entry moved into the
// Storage Root's trash with one rename, then the trash deleted inside your
// user namespace.
func resetProfilePaths(c *cli.Context, rd resolvedDomain, scope []string, yes, asJSON bool) error {
	lock, found, err := lockProfileInactive(rd)
	if err != nil {
		return err
	}
	if !found {
		fmt.Fprintf(c.App.ErrWriter, "profile %s has no stored profile paths: nothing to reset\n", rd.prof.Name)
		return nil
	}
	defer lock.Close()
	fmt.Fprintf(c.App.ErrWriter, "profile %s: reset profile path(s) %s\nThey are shared by every workspace of profile %s: the login state and settings kept there are discarded for all of them (the next run starts with an empty directory). Domains' State Anchors, workspaces and images are not touched.\n",
		rd.prof.Name, strings.Join(scope, ", "), rd.prof.Name)
	if err := confirm(c, yes, "Reset?"); err != nil {
		return err
	}
	var done []string
	for _, g := range scope {
		moved, err := profilestate.Discard(rd.paths.StorageRoot, rd.prof.Name, g, time.Now())
		if err != nil {
			return fmt.Errorf("reset %s: %w", g, err)
		}
		if moved {
			done = append(done, g)
		}
	}
	// Every entry of the scope is in the trash, none is deleted yet.
	failpoint.Hit(profileResetFailpoint)
	rsPath, err := rmHelper()
	if err == nil {
		_, err = statemaint.PurgeTrash(c.Context, rsPath, rd.paths.StorageRoot)
	}
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "lazaret: the discarded files wait in the Storage Root's trash (nothing uses them; the next `lazaret run` or `lazaret rm` deletes them): %v\n", err)
	}
	if asJSON {
		return json.NewEncoder(c.App.Writer).Encode(map[string]any{"profile": rd.prof.Name, "reset_profile_paths": done})
	}
	if len(done) == 0 {
		fmt.Fprintf(c.App.Writer, "nothing stored at %s: nothing reset\n", strings.Join(scope, ", "))
		return nil
	}
	fmt.Fprintf(c.App.Writer, "reset: %s (profile %s)\n", strings.Join(done, ", "), rd.prof.Name)
	return nil
}

// errNotProfilePath explains a reset of a path that is neither anchored
// nor a profile path.
func errNotProfilePath(rd resolvedDomain, p string) error {
	return errdefs.New(errdefs.ErrInvalid, "Domain %s has no State Anchor at %s and profile %s has no profile path there: `lazaret state list` shows both (a path inside an anchor, e.g. /usr/local in /usr, is reset with its anchor)", rd.paths.ID, p, rd.prof.Name)
}

// lockProfileInactive takes the profile's lock exclusively. A sandbox of
// the profile that is still tearing down (its last session just left: the
// CLI returns before the Runtime Supervisor has exited and let go of the
// profile paths) is waited for, up to 20 seconds; a Domain of the profile
// that is starting or running, in any workspace, is refused at once.
func lockProfileInactive(rd resolvedDomain) (*os.File, bool, error) {
	roots := domain.Roots{Storage: rd.paths.StorageRoot, Runtime: filepath.Dir(rd.paths.RuntimeDir)}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lock, found, err := profilestate.LockExclusive(rd.paths.StorageRoot, rd.prof.Name)
		if !errors.Is(err, errdefs.ErrRefused) || time.Now().After(deadline) {
			return lock, found, err
		}
		rds, lerr := storedDomains(roots)
		if lerr != nil {
			return nil, found, err
		}
		for _, d := range rds {
			if d.prof.Name != rd.prof.Name {
				continue
			}
			// A coordinator that answers and is neither stopping nor
			// failed holds the profile paths for its sessions.
			if st, serr := client.LiveStatus(d.paths, d.prof.Name); serr == nil && st.GetState() != "stopping" && st.GetState() != "failed" {
				return nil, found, err
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
