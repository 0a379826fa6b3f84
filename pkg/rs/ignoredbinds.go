package rs

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ignoredbind"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// ignoredBindResolve keeps the source check inside the Domain Root, on its
// filesystem, without a symlink.
const ignoredBindResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// overflowID is what an id outside this user namespace's map reads as.
const overflowID = 65534

// prepareIgnoredBinds re-checks, just before runsc starts, every bind of
// an ignored directory from the Domain's Ignored Workspace State that HC
// put in the spec (package ignoredbind), and fails the start if one is not
// exactly right: each must be <DomainRoot>/ignored-state/<rel> at
// /workspace/<rel> with rel clean and outside every Git directory, the
// workspace must be the routed one (its daemon serves the mount point),
// and the source must be a directory reached from the Domain Root without
// a symlink or another filesystem, owned by the developer or a guest id of
// the Domain's range. When the session user is not root, a source (and
// what the developer owns in it, the router's earlier writes) is given to
// the session user's guest ids, so the agent can write its own dependency
// directories.
func (s *supervisor) prepareIgnoredBinds() error {
	st := s.start
	var sp specs.Spec
	if err := json.Unmarshal(st.OciSpecJson, &sp); err != nil {
		return errdefs.Mark(err, errdefs.ErrCorrupt)
	}
	root := anchor.Root(st.StorageRoot, st.DomainId)
	prefix := path.Join(root, ocispec.IgnoredStateDir) + "/"
	var binds []specs.Mount
	for _, m := range sp.Mounts {
		if strings.HasPrefix(path.Clean(m.Source)+"/", prefix) || strings.HasPrefix(m.Source, prefix) {
			binds = append(binds, m)
		}
	}
	if len(binds) == 0 {
		return nil
	}
	if len(binds) > ignoredbind.MaxBinds {
		return errdefs.New(errdefs.ErrRefused, "the spec binds %d ignored directories, more than %d", len(binds), ignoredbind.MaxBinds)
	}
	if g := st.GitRouting; g == nil || !g.IgnoredPathIsolation {
		return errdefs.New(errdefs.ErrRefused, "the spec binds ignored directories from Ignored Workspace State without ignored-path isolation")
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errdefs.Mark(&os.PathError{Op: "open Domain Root", Path: root, Err: err}, errdefs.ErrUnavailable)
	}
	defer unix.Close(rfd)
	for _, m := range binds {
		rel := strings.TrimPrefix(m.Source, prefix)
		if !ignoredbind.Valid(rel) || ignoredbind.HasGitComponent(rel) || m.Source != ocispec.IgnoredBindSource(root, rel) || m.Destination != path.Join(ocispec.WorkspaceDir, rel) {
			return errdefs.New(errdefs.ErrRefused, "refusing to bind %s at %s: not an ignored directory's own state at its workspace path", m.Source, m.Destination)
		}
		if err := s.checkIgnoredBind(rfd, rel); err != nil {
			return fmt.Errorf("ignored directory %s cannot be bound from %s: %w", rel, m.Source, err)
		}
	}
	s.log.Info("ignored directories bound from Ignored Workspace State checked", "count", len(binds))
	return nil
}

// checkIgnoredBind checks (and, for a non-root session user, hands over)
// the state directory ignored-state/rel beneath the Domain Root rfd.
func (s *supervisor) checkIgnoredBind(rfd int, rel string) error {
	fd, err := unix.Openat2(rfd, ocispec.IgnoredStateDir+"/"+rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: ignoredBindResolve})
	if err != nil {
		return errdefs.Mark(&os.PathError{Op: "open beneath the Domain Root without symlinks", Path: rel, Err: err}, errdefs.ErrRefused)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if !ownedInDomain(st.Uid, st.Gid) {
		return errdefs.New(errdefs.ErrRefused, "owned by %d:%d, neither the developer nor a guest id of the Domain", st.Uid, st.Gid)
	}
	uid, gid := s.start.SessionUid, s.start.SessionGid
	if uid == 0 || st.Uid == uid && st.Gid == gid {
		return nil
	}
	// The directory is the developer's (created by HC or by the router):
	// give it, and what the developer owns in it, to the session user.
	if st.Uid == 0 {
		n, err := chownDeveloperTree(fd, uid, gid, 0)
		if err != nil {
			return fmt.Errorf("give it to the session user %d:%d: %w", uid, gid, err)
		}
		s.log.Info("ignored directory given to the session user", "path", rel, "uid", uid, "gid", gid, "entries", n)
	}
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		return &os.PathError{Op: "chown", Path: rel, Err: err}
	}
	return nil
}

// ownedInDomain: the developer (0 in this namespace) or a mapped guest id.
func ownedInDomain(uid, gid uint32) bool {
	return uid < ocispec.GuestIDs && gid < ocispec.GuestIDs && uid != overflowID && gid != overflowID
}

// chownDeveloperTree gives every entry beneath the directory dirfd that
// the developer (id 0 here) owns to uid:gid, never following a symlink;
// it returns how many it changed.
func chownDeveloperTree(dirfd int, uid, gid uint32, depth int) (int, error) {
	if depth > statetree.MaxDepth {
		return 0, errdefs.New(errdefs.ErrRefused, "directory nesting deeper than %d", statetree.MaxDepth)
	}
	names, err := statetree.ReadNames(dirfd)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return n, &os.PathError{Op: "lstat", Path: name, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			cfd, err := statetree.OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			if err != nil {
				return n, err
			}
			k, err := chownDeveloperTree(cfd, uid, gid, depth+1)
			unix.Close(cfd)
			n += k
			if err != nil {
				return n, err
			}
		}
		if st.Uid != 0 {
			continue
		}
		g := int(gid)
		if st.Gid != 0 {
			g = -1
		}
		if err := unix.Fchownat(dirfd, name, int(uid), g, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return n, &os.PathError{Op: "lchown", Path: name, Err: err}
		}
		n++
	}
	return n, nil
}
