package rs

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/mountns"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// hostBind is one spec bind RS may make itself (StartSandbox.host_binds):
// the spec mount at index, bound from source over rel beneath dir, the
// source of the enclosing rbind.
type hostBind struct {
	index    int
	source   string
	dir, rel string
	readOnly bool
}

// planHostBinds checks each destination the coordinator named against the
// spec and returns where RS would bind it. A destination must name exactly
// one mount, a plain single bind ("bind" with "rw" or "ro", nothing that
// the sentry would have to enforce such as nosuid or noexec) of an
// absolute source, beneath an enclosing mount mounted before it that is
// an rbind of the same access: what runsc would have mounted it on. Any
// other shape is refused: the coordinator built the spec, so a mismatch is
// a bug, not a sandbox's doing.
func planHostBinds(sp *specs.Spec, dests []string) ([]hostBind, error) {
	var out []hostBind
	for _, dest := range dests {
		idx := -1
		for i, m := range sp.Mounts {
			if m.Destination == dest {
				if idx >= 0 {
					return nil, errdefs.New(errdefs.ErrInvalid, "host-side bind %s: the spec mounts it twice", dest)
				}
				idx = i
			}
		}
		if idx < 0 {
			return nil, errdefs.New(errdefs.ErrInvalid, "host-side bind %s: the spec has no such mount", dest)
		}
		m := sp.Mounts[idx]
		ro, ok := plainBind(m, "bind")
		if !ok || !path.IsAbs(m.Source) || path.Clean(m.Source) != m.Source || path.Clean(dest) != dest || !path.IsAbs(dest) {
			return nil, errdefs.New(errdefs.ErrInvalid, "host-side bind %s: %s %s %v is not a plain bind of a clean absolute source", dest, m.Type, m.Source, m.Options)
		}
		// The mount runsc would have resolved dest through: the last one
		// before it whose destination encloses dest.
		parent := -1
		for i := idx - 1; i >= 0; i-- {
			if strings.HasPrefix(dest, strings.TrimSuffix(sp.Mounts[i].Destination, "/")+"/") {
				parent = i
				break
			}
		}
		if parent < 0 {
			return nil, errdefs.New(errdefs.ErrInvalid, "host-side bind %s: no mount encloses it", dest)
		}
		p := sp.Mounts[parent]
		pro, pok := plainBind(p, "rbind")
		if !pok || pro != ro || !path.IsAbs(p.Source) {
			return nil, errdefs.New(errdefs.ErrInvalid, "host-side bind %s: its enclosing mount %s (%s %v) is not an rbind of the same access", dest, p.Destination, p.Type, p.Options)
		}
		out = append(out, hostBind{index: idx, source: m.Source, dir: p.Source, rel: strings.TrimPrefix(dest, strings.TrimSuffix(p.Destination, "/")+"/"), readOnly: ro})
	}
	return out, nil
}

// plainBind reports whether m is a bind mount whose options are exactly
// kind ("bind" or "rbind") and one of rw or ro, and whether it is
// read-only.
func plainBind(m specs.Mount, kind string) (readOnly, ok bool) {
	if m.Type != "bind" || len(m.Options) != 2 || !slices.Contains(m.Options, kind) {
		return false, false
	}
	switch {
	case slices.Contains(m.Options, "ro"):
		return true, true
	case slices.Contains(m.Options, "rw"):
		return false, true
	}
	return false, false
}

// makeHostBinds binds the coordinator's host-side binds beneath their
// enclosing mounts' sources, after the State Anchors are mounted (the
// /etc anchor encloses the name-service files), and drops each one made
// from the spec runsc gets. A sandbox may have removed /etc/hosts or put a
// symlink or a directory in its place in an earlier generation (the bind
// does not stop it, unlike a mount the sentry knows): the file is made
// again, the symlink replaced, the directory moved aside with a warning. A
// mount point RS cannot resolve beneath its directory stays a spec mount.
func (s *supervisor) makeHostBinds() error {
	plan, err := planHostBinds(s.spec, s.start.GetHostBinds())
	if err != nil {
		return err
	}
	made := map[int]bool{}
	for _, b := range plan {
		fb, err := mountns.BindFileBeneath(b.source, b.dir, b.rel, b.readOnly)
		if errors.Is(err, mountns.ErrTargetIsDir) {
			// Only a sandbox makes one (removing the bound file, then
			// mkdir): keep its content, out of the way.
			dest := s.spec.Mounts[b.index].Destination
			moved, merr := mountns.MoveAside(b.dir, b.rel)
			if merr != nil {
				return fmt.Errorf("%s is a directory where the generation's file goes, and moving it aside failed: %w", dest, merr)
			}
			s.progress("%s%s was a directory (made in an earlier session); it is now %s, and %s is the generation's file again", control.ProgressWarning, dest, path.Join(path.Dir(dest), path.Base(moved)), dest)
			fb, err = mountns.BindFileBeneath(b.source, b.dir, b.rel, b.readOnly)
		}
		if errors.Is(err, mountns.ErrTargetNotFile) {
			s.log.Info("host-side bind left to runsc", "destination", s.spec.Mounts[b.index].Destination, "reason", err)
			continue
		}
		if err != nil {
			return err
		}
		s.hostBinds = append(s.hostBinds, fb)
		made[b.index] = true
	}
	if len(made) == 0 {
		return nil
	}
	mounts := make([]specs.Mount, 0, len(s.spec.Mounts)-len(made))
	for i, m := range s.spec.Mounts {
		if !made[i] {
			mounts = append(mounts, m)
		}
	}
	s.spec.Mounts = mounts
	return nil
}

// unmakeHostBinds detaches the host-side binds still in place, before the
// State Anchors they lie in are unmounted.
func (s *supervisor) unmakeHostBinds() {
	for i := len(s.hostBinds) - 1; i >= 0; i-- {
		b := s.hostBinds[i]
		if _, err := mountns.UnbindFile(b); err != nil {
			s.log.Warn("host-side bind not detached (it ends with the mount namespace)", "dir", b.Dir, "rel", b.Rel, "err", err)
		}
	}
	s.hostBinds = nil
}

// configJSON is bundle/config.json: the coordinator's spec as it came when
// RS made no host-side bind, else the spec less them.
func (s *supervisor) configJSON() ([]byte, error) {
	if len(s.hostBinds) == 0 {
		return s.start.GetOciSpecJson(), nil
	}
	return ocispec.Marshal(s.spec)
}
