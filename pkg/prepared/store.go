package prepared

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// resolveBeneath confines every lookup below a directory descriptor and
// refuses symlinks (including /proc magic links) anywhere on the path.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens path relative to dirfd with openat2 and resolveBeneath.
func openBeneath(dirfd int, path string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveBeneath}
	for {
		fd, err := unix.Openat2(dirfd, path, how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: path, Err: err}
		}
		return fd, nil
	}
}

// Store holds descriptors of StorageRoot, prepared/ and prepared/.staging/:
// the preparer's (package prepare) and gc's access to the prepared tree.
type Store struct {
	root        string
	rootFD      int
	preparedFD  int
	stagingFD   int
	preparedDir string // path hint for messages and the chroot fallback
	// step records a PreparedLower step (prepare.Options.Step, GCPolicy.Step).
	step func(action, artifactID string)
}

// SetStep sets the function RecordStep calls (nil: none).
func (st *Store) SetStep(step func(action, artifactID string)) { st.step = step }

// RecordStep calls the SetStep function, when set, with a
// tla/PreparedLower.tla action and the artifact ID.
func (st *Store) RecordStep(action, id string) {
	if st.step != nil {
		st.step(action, id)
	}
}

// OpenStore opens the Storage Root (its last component must not be a
// symlink) and, beneath it, prepared/ and prepared/.staging/, creating them
// when create is set.
func OpenStore(root string, create bool) (*Store, error) {
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open storage root: %w", &os.PathError{Op: "open", Path: root, Err: err})
	}
	st := &Store{root: root, rootFD: rootFD, preparedFD: -1, stagingFD: -1, preparedDir: filepath.Join(root, preparedDir)}
	if st.preparedFD, err = openOrCreateDir(rootFD, preparedDir, 0o755, create); err != nil {
		st.Close()
		return nil, err
	}
	if st.stagingFD, err = openOrCreateDir(st.preparedFD, stagingDir, 0o700, create); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func openOrCreateDir(dirfd int, name string, mode uint32, create bool) (int, error) {
	if create {
		if err := unix.Mkdirat(dirfd, name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, &os.PathError{Op: "mkdirat", Path: name, Err: err}
		}
	}
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
			return -1, fmt.Errorf("%s is not a plain directory beneath the storage root: %w", name, err)
		}
		return -1, err
	}
	return fd, nil
}

// Close closes the descriptors.
func (st *Store) Close() {
	for _, fd := range []int{st.stagingFD, st.preparedFD, st.rootFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// Lookup validates and returns the published artifact id. found is false
// when prepared/<id> does not exist.
func (st *Store) Lookup(id, manifestDigest string) (*Record, bool, error) {
	fd, err := openBeneath(st.preparedFD, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open artifact %s: %w (%w)", id, err, ErrCorrupt)
	}
	defer unix.Close(fd)
	rec, err := validateArtifact(fd, id, manifestDigest)
	if err != nil {
		return nil, false, fmt.Errorf("artifact %s (%s): %w", id, filepath.Join(st.preparedDir, id), err)
	}
	return rec, true, nil
}

// Staging is one preparation in progress: prepared/.staging/<name>.
type Staging struct {
	st       *Store
	name     string
	dirFD    int // flock(LOCK_EX) held while the preparation runs
	rootfsFD int
	removed  bool
}

// NewStaging creates prepared/.staging/<name>, the name the prepare intent
// recorded.
func (st *Store) NewStaging(name string) (*Staging, error) {
	if err := unix.Mkdirat(st.stagingFD, name, 0o700); err != nil {
		return nil, fmt.Errorf("create staging directory: %w", &os.PathError{Op: "mkdirat", Path: name, Err: err})
	}
	s := &Staging{st: st, name: name, dirFD: -1, rootfsFD: -1}
	var err error
	if s.dirFD, err = openBeneath(st.stagingFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err != nil {
		_ = s.Discard()
		return nil, err
	}
	if err := unix.Flock(s.dirFD, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = s.Discard()
		return nil, fmt.Errorf("lock staging directory: %w", err)
	}
	// Artifact directories are 0755 so that a runtime running under
	// another uid of the namespace can traverse into rootfs.
	if err := unix.Fchmod(s.dirFD, 0o755); err != nil {
		_ = s.Discard()
		return nil, err
	}
	if err := unix.Mkdirat(s.dirFD, rootfsName, 0o755); err != nil {
		_ = s.Discard()
		return nil, &os.PathError{Op: "mkdirat", Path: rootfsName, Err: err}
	}
	if s.rootfsFD, err = openBeneath(s.dirFD, rootfsName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err != nil {
		_ = s.Discard()
		return nil, err
	}
	// Owner 0:0 and 0755 regardless of umask; a "./" entry in the first
	// layer may set other metadata.
	if err := unix.Fchown(s.rootfsFD, 0, 0); err != nil {
		_ = s.Discard()
		return nil, fmt.Errorf("chown rootfs: %w", err)
	}
	if err := unix.Fchmod(s.rootfsFD, 0o755); err != nil {
		_ = s.Discard()
		return nil, err
	}
	return s, nil
}

// Name is the staging directory's name (the prepare intent's).
func (s *Staging) Name() string { return s.name }

// RootfsFD is the descriptor of the staging rootfs, open while the
// preparation runs.
func (s *Staging) RootfsFD() int { return s.rootfsFD }

// RootfsPath returns a path naming the staging rootfs for the chroot of the
// layer-applying child: preferably the /proc magic link of our descriptor
// (immune to renames and symlink swaps), else the plain path. Either is
// checked to name the very directory we hold open.
func (s *Staging) RootfsPath() (string, error) {
	var want unix.Stat_t
	if err := unix.Fstat(s.rootfsFD, &want); err != nil {
		return "", err
	}
	candidates := []string{
		fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), s.rootfsFD),
		filepath.Join(s.st.preparedDir, stagingDir, s.name, rootfsName),
	}
	for _, c := range candidates {
		var got unix.Stat_t
		if err := unix.Stat(c, &got); err == nil && got.Dev == want.Dev && got.Ino == want.Ino {
			return c, nil
		}
	}
	return "", fmt.Errorf("staging rootfs %s is not reachable by path (was the storage root moved?)", candidates[1])
}

// CloseFDs closes the staging descriptors (releasing its flock) without
// removing anything: a failed preparation's tree is quarantined through its
// intent.
func (s *Staging) CloseFDs() {
	if s.rootfsFD >= 0 {
		unix.Close(s.rootfsFD)
		s.rootfsFD = -1
	}
	if s.dirFD >= 0 {
		unix.Close(s.dirFD)
		s.dirFD = -1
	}
}

// Discard removes the staging tree. Safe to call more than once.
func (s *Staging) Discard() error {
	if s.removed {
		return nil
	}
	if s.rootfsFD >= 0 {
		unix.Close(s.rootfsFD)
		s.rootfsFD = -1
	}
	err := removeAllAt(s.st.stagingFD, s.name)
	if s.dirFD >= 0 {
		unix.Close(s.dirFD) // releases the flock
		s.dirFD = -1
	}
	if err == nil {
		s.removed = true
	}
	return err
}

// Publish renames the staging tree to prepared/<id> without replacing an
// existing one. won is false when <id> already existed.
func (st *Store) Publish(s *Staging, id string) (won bool, err error) {
	if err := unix.Syncfs(s.dirFD); err != nil {
		return false, fmt.Errorf("syncfs: %w", err)
	}
	err = unix.Renameat2(st.stagingFD, s.name, st.preparedFD, id, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		return false, nil
	}
	if err != nil {
		return false, &os.LinkError{Op: "renameat2", Old: s.name, New: id, Err: err}
	}
	s.removed = true // it is the artifact now
	if s.rootfsFD >= 0 {
		unix.Close(s.rootfsFD)
		s.rootfsFD = -1
	}
	unix.Close(s.dirFD)
	s.dirFD = -1
	for _, fd := range []int{st.preparedFD, st.stagingFD} {
		if err := unix.Fsync(fd); err != nil {
			return true, fmt.Errorf("fsync: %w", err)
		}
	}
	return true, nil
}

// removeAllAt removes name (a file or a whole tree) beneath dirfd without
// following symlinks.
func removeAllAt(dirfd int, name string) error {
	return removeAllAtCtx(context.Background(), dirfd, name)
}

// removeAllAtCtx is removeAllAt that stops before the next directory entry
// once ctx is done and returns ctx's error: what it deleted stays deleted,
// the rest stays in place for a later call to finish.
func removeAllAtCtx(ctx context.Context, dirfd int, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1) // all at once: deleting while reading may skip entries
	if err != nil {
		f.Close()
		return err
	}
	for _, n := range names {
		if err := removeAllAtCtx(ctx, fd, n); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlinkat", Path: name, Err: err}
	}
	return nil
}
