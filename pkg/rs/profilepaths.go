package rs

import (
	"path/filepath"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/profilestate"
)

// prepareProfilePaths makes the profile's stored directories of every
// profile path exist before runsc starts (the gofer opens each bind's
// source): a new one is owned by the session user's guest uid and gid, so
// the user can write its login state there. It first takes the profile's
// shared lock, held until the sandbox is proven gone, so that no reset
// removes a directory a sandbox of this profile, in any workspace, uses.
// The spec must bind exactly those directories, each at its guest path.
func (s *supervisor) prepareProfilePaths() error {
	st := s.start
	sp := s.spec
	profilesDir := filepath.Join(st.StorageRoot, profilestate.Dir) + "/"
	want := map[string]string{} // source → guest path
	for _, g := range st.ProfilePaths {
		src, err := profilestate.Source(st.StorageRoot, st.Profile, g)
		if err != nil {
			return err
		}
		want[src] = g
	}
	for _, m := range sp.Mounts {
		if !strings.HasPrefix(m.Source, profilesDir) {
			continue
		}
		if g, ok := want[m.Source]; !ok || g != m.Destination {
			return errdefs.New(errdefs.ErrRefused, "the spec binds %s at %s, which is not one of the profile's profile paths", m.Source, m.Destination)
		}
	}
	if len(st.ProfilePaths) == 0 {
		return nil
	}
	for _, g := range st.ProfilePaths {
		if err := profilestate.CheckImage(s.art.Rootfs, g); err != nil {
			return err
		}
	}
	hold, err := profilestate.Hold(st.StorageRoot, st.Profile)
	if err != nil {
		return err
	}
	s.profileHold = hold
	for _, g := range st.ProfilePaths {
		_, created, err := profilestate.Prepare(st.StorageRoot, st.Profile, g, int(st.SessionUid), int(st.SessionGid))
		if err != nil {
			return err
		}
		if created {
			s.log.Info("profile path created", "profile", st.Profile, "guest_path", g, "uid", st.SessionUid)
		}
	}
	return nil
}

// releaseProfilePaths drops the profile's shared lock (the sandbox and its
// gofer are gone).
func (s *supervisor) releaseProfilePaths() {
	if s.profileHold != nil {
		s.profileHold.Close()
		s.profileHold = nil
	}
}
