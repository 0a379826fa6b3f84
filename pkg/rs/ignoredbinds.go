package rs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ignoredbind"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/statetree"
)

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
// the Domain's range. First it gives back what an interrupted generation
// left given (returnAfterCrash); then it records the bound paths
// (GivenFile) before anything is given away. When the session user is not
// root, a source (and what the developer owns in it) is given to the
// session user's guest ids, so the agent can write its own dependency
// directories.
func (s *supervisor) prepareIgnoredBinds() error {
	st, sp := s.start, s.spec // launch parsed the spec
	root := anchor.Root(st.StorageRoot, st.DomainId)
	if err := s.returnAfterCrash(root); err != nil {
		return err
	}
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
	rfd, err := openDomainRoot(root, unix.O_PATH)
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrUnavailable)
	}
	defer unix.Close(rfd)
	var rels []string
	for _, m := range binds {
		rel := strings.TrimPrefix(m.Source, prefix)
		if !ignoredbind.Valid(rel) || ignoredbind.HasGitComponent(rel) || m.Source != ocispec.IgnoredBindSource(root, rel) || m.Destination != path.Join(ocispec.WorkspaceDir, rel) {
			return errdefs.New(errdefs.ErrRefused, "refusing to bind %s at %s: not an ignored directory's own state at its workspace path", m.Source, m.Destination)
		}
		rels = append(rels, rel)
	}
	// Recorded before anything is given away or runsc writes: a crash from
	// here on leaves the record for the next supervisor (returnAfterCrash).
	if err := writeGiven(root, rels); err != nil {
		return fmt.Errorf("record the bound ignored directories: %w", err)
	}
	s.given = rels
	var jobs []*giveJob
	for _, m := range binds {
		rel := strings.TrimPrefix(m.Source, prefix)
		job, err := s.checkIgnoredBind(rfd, rel)
		if err != nil {
			for _, j := range jobs {
				unix.Close(j.fd)
			}
			return fmt.Errorf("ignored directory %s cannot be bound from %s: %w", rel, m.Source, err)
		}
		if job != nil {
			jobs = append(jobs, job)
		}
	}
	s.log.Info("ignored directories bound from Ignored Workspace State checked", "count", len(binds))
	if len(jobs) > 0 {
		// What is inside the bound directories is given to the session
		// user while runsc boots: no guest process runs before readiness,
		// which awaits it (awaitGiving).
		done := make(chan error, 1)
		s.giving = done
		go func() { done <- s.give(jobs) }()
	}
	return nil
}

// awaitGiving waits for the contents of the bound ignored directories to
// be given to the session user (prepareIgnoredBinds), once.
func (s *supervisor) awaitGiving() error {
	if s.giving == nil {
		return nil
	}
	err := <-s.giving
	s.giving = nil
	return err
}

// GivenFile, in the Domain Root, records the ignored directories a
// generation binds into its sandbox while it runs. In a bind the guest's
// own ids reach the host: a file a non-root guest user writes, or a guest
// chown, leaves a subordinate id on the host, and for a non-root session
// user the directories are given to that user for the generation. The
// Runtime Supervisor gives every bound directory back to the developer
// when the sandbox is gone (returnIgnoredBinds) and then removes the
// record; after a crash the next supervisor finds it and does the same
// before anything else (returnAfterCrash). So Ignored Workspace State is
// the developer's whenever no generation runs, as the Git-routing daemon
// keeps it always.
const GivenFile = "ignored-binds.given"

// givenMagic and givenVersion open the record's first line; a version
// newer than this build's is refused.
const (
	givenMagic   = "lazaret-ignored-binds-given"
	givenVersion = 1
)

// writeGiven durably records rels (workspace-relative) as given. A torn
// write reads as damaged, which returns everything.
func writeGiven(root string, rels []string) error {
	rfd, err := openDomainRoot(root, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	fd, err := statetree.OpenBeneath(rfd, GivenFile, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), GivenFile)
	_, err = fmt.Fprintf(f, "%s %d\n%s\n", givenMagic, givenVersion, strings.Join(rels, "\n"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", GivenFile, err)
	}
	return unix.Fsync(rfd)
}

// removeGiven durably removes the record.
func removeGiven(root string) error {
	rfd, err := openDomainRoot(root, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	if err := unix.Unlinkat(rfd, GivenFile, 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "unlink", Path: GivenFile, Err: err}
	}
	return unix.Fsync(rfd)
}

// readGiven reads the record: nil, nil when there is none; all reports a
// record that names no usable paths (damaged), so everything is returned.
func readGiven(root string) (rels []string, all bool, err error) {
	rfd, err := openDomainRoot(root, unix.O_RDONLY)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(rfd)
	fd, err := statetree.OpenBeneath(rfd, GivenFile, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, nil
	}
	f := os.NewFile(uintptr(fd), GivenFile)
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return nil, true, nil
	}
	head, rest, _ := strings.Cut(string(b), "\n")
	var v int
	if _, err := fmt.Sscanf(head, givenMagic+" %d", &v); err != nil || v < 1 {
		return nil, true, nil
	}
	if v > givenVersion {
		return nil, false, errdefs.New(errdefs.ErrRefused, "%s was written by a newer Lazaret (format %d, this build reads %d): run that version to end its Domain, or `lazaret state reset --ignored` with it", path.Join(root, GivenFile), v, givenVersion)
	}
	for _, r := range strings.Split(strings.TrimSpace(rest), "\n") {
		if r == "" {
			continue
		}
		if !ignoredbind.Valid(r) {
			return nil, true, nil
		}
		rels = append(rels, r)
	}
	return rels, false, nil
}

// returnAfterCrash gives back to the developer what an earlier generation
// that ended without doing so (a crash) left given, before this one binds
// anything.
func (s *supervisor) returnAfterCrash(root string) error {
	rels, all, err := readGiven(root)
	if err != nil {
		return err
	}
	if rels == nil && !all {
		return nil
	}
	if all {
		rels = []string{""}
	}
	n, err := returnTrees(root, rels)
	if err != nil {
		return fmt.Errorf("give the ignored directories an earlier generation bound back to the developer: %w", err)
	}
	s.log.Warn("ignored directories an interrupted generation bound given back to the developer", "paths", len(rels), "entries", n)
	return removeGiven(root)
}

// returnIgnoredBinds gives this generation's bound ignored directories
// back to the developer once nothing of the sandbox writes there, and
// removes the record. A failure keeps the record for the next supervisor.
func (s *supervisor) returnIgnoredBinds() {
	if err := s.awaitGiving(); err != nil {
		s.log.Warn("giving bound ignored directories to the session user failed", "err", err)
	}
	if s.given == nil {
		return
	}
	root := anchor.Root(s.start.StorageRoot, s.start.DomainId)
	began := time.Now()
	n, err := returnTrees(root, s.given)
	if err == nil {
		err = removeGiven(root)
	}
	if err != nil {
		s.log.Error("bound ignored directories not given back to the developer: the next start does it", "err", err)
		return
	}
	s.log.Info("bound ignored directories given back to the developer", "paths", len(s.given), "entries", n, "duration", time.Since(began))
	s.given = nil
}

// returnTrees gives every entry of ignored-state/<rel> for each rel ("":
// all of it), and the directory itself, to the developer; a missing one
// (reset meanwhile) is skipped.
func returnTrees(root string, rels []string) (int, error) {
	rfd, err := openDomainRoot(root, unix.O_PATH)
	if err != nil {
		return 0, err
	}
	defer unix.Close(rfd)
	total := 0
	for _, rel := range rels {
		p := ocispec.IgnoredStateDir
		if rel != "" {
			p += "/" + rel
		}
		fd, err := statetree.OpenBeneath(rfd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return total, fmt.Errorf("beneath the Domain Root, without symlinks or mounts: %w", err)
		}
		n, err := chownTree(fd, toDeveloper)
		total += n
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(fd, &st); err == nil && (st.Uid != 0 || st.Gid != 0) {
				err = unix.Fchown(fd, 0, 0)
				total++
			}
		}
		unix.Close(fd)
		if err != nil {
			return total, fmt.Errorf("%s: %w", p, err)
		}
	}
	return total, nil
}

// giveJob is a bound directory (open) whose contents go to the session
// user.
type giveJob struct {
	fd  int
	rel string
}

// checkIgnoredBind checks the state directory ignored-state/rel beneath
// the Domain Root rfd and, for a non-root session user, gives the
// directory itself to that user at once (runsc reads its owner when it
// mounts it); when the developer owned it, it returns the job of giving
// what the developer owns inside (the router's earlier writes, everything
// after a return), whose descriptor the caller closes.
func (s *supervisor) checkIgnoredBind(rfd int, rel string) (*giveJob, error) {
	fd, err := statetree.OpenBeneath(rfd, ocispec.IgnoredStateDir+"/"+rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("beneath the Domain Root, without symlinks or mounts: %w", err), errdefs.ErrRefused)
	}
	keep := false
	defer func() {
		if !keep {
			unix.Close(fd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if !ownedInDomain(st.Uid, st.Gid) {
		return nil, errdefs.New(errdefs.ErrRefused, "owned by %d:%d, neither the developer nor a guest id of the Domain", st.Uid, st.Gid)
	}
	uid, gid := s.start.SessionUid, s.start.SessionGid
	if uid == 0 || st.Uid == uid && st.Gid == gid {
		return nil, nil
	}
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		return nil, &os.PathError{Op: "chown", Path: rel, Err: err}
	}
	if st.Uid != 0 {
		return nil, nil
	}
	keep = true
	return &giveJob{fd: fd, rel: rel}, nil
}

// give gives what the developer owns beneath each job's directory to the
// session user, closing the descriptors; the first error is returned.
func (s *supervisor) give(jobs []*giveJob) error {
	uid, gid := s.start.SessionUid, s.start.SessionGid
	var first error
	for _, j := range jobs {
		began := time.Now()
		n, err := chownTree(j.fd, toSessionUser(uid, gid))
		unix.Close(j.fd)
		if err != nil {
			if first == nil {
				first = fmt.Errorf("give ignored directory %s to the session user %d:%d: %w", j.rel, uid, gid, err)
			}
			continue
		}
		s.log.Info("ignored directory given to the session user", "path", j.rel, "uid", uid, "gid", gid, "entries", n, "duration", time.Since(began))
	}
	return first
}

// openDomainRoot opens the Domain Root directory itself (never through a
// symlink) with flags (O_RDONLY or O_PATH).
func openDomainRoot(root string, flags int) (int, error) {
	fd, err := unix.Open(root, flags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open Domain Root", Path: root, Err: err}
	}
	return fd, nil
}

// ownedInDomain: the developer (0 in this namespace) or a mapped guest id.
func ownedInDomain(uid, gid uint32) bool {
	return uid < ocispec.GuestIDs && gid < ocispec.GuestIDs && uid != overflowID && gid != overflowID
}

// toSessionUser gives what the developer (id 0 here) owns to uid:gid,
// keeping a group other than the developer's.
func toSessionUser(uid, gid uint32) func(*unix.Stat_t) (int, int, bool) {
	return func(st *unix.Stat_t) (int, int, bool) {
		if st.Uid != 0 {
			return 0, 0, false
		}
		g := int(gid)
		if st.Gid != 0 {
			g = -1
		}
		return int(uid), g, true
	}
}

// toDeveloper gives back to the developer (0:0 here) whatever another id
// owns.
func toDeveloper(st *unix.Stat_t) (int, int, bool) {
	return 0, 0, st.Uid != 0 || st.Gid != 0
}
