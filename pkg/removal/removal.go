// Package removal is the mechanism of `lazaret rm`: removing a Domain's
// persistent state (its Domain Root: State Anchor uppers, Ignored Workspace
// State, Domain Store, lock and log), or everything under the Storage Root
// (every Domain, the prepared images, the Storage Catalog), and the
// developer's built images.
//
// Most of that state belongs to the developer's subordinate ids, in
// directories the developer cannot enter or empty. Removal is therefore two
// steps, in the manner of the resets' trash (spec OR-5, SR-14):
//
//  1. the caller — holding the Domain's lifecycle lock, having established
//     that nothing uses the state — moves each tree aside with one rename
//     (renameat2 RENAME_NOREPLACE, then fsync of both directories) into the
//     Storage Root's trash, so a crash leaves every tree either complete in
//     place or wholly in the trash, where nothing uses it;
//  2. PurgeTrash deletes the trash, as namespace root of the developer's
//     user namespace (package statemaint runs it there for `lazaret rm`;
//     every Runtime Supervisor runs it too, so the next `lazaret rm` or
//     `lazaret run` finishes an interrupted deletion).
//
// Layout beneath the Storage Root:
//
//	.trash/
//	  domain-<id>.<unix ns>[.N]   a Domain Root moved aside by `lazaret rm`
//	  root-<name>.<unix ns>[.N]   another Storage Root entry (`lazaret rm --all`)
//
// Every lookup is descriptor-relative: the Storage Root is opened with
// O_NOFOLLOW and owner checks, and everything beneath it with
// statetree.OpenBeneath (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV),
// so a symlink or mount planted in the Storage Root never leads a removal
// out of it, and the deletion never follows a symlink.
//
// Built images ($XDG_DATA_HOME/lazaret/images) are the developer's own
// files: RemoveImages moves them into $XDG_DATA_HOME/lazaret/.trash the same
// way and deletes them as the developer; PurgeImagesTrash finishes an
// interrupted removal.
//
// This package makes no assumption about liveness: the caller proves the
// Domains inactive (lifecycle locks, mount checks) and the prepared images
// unused (prepared.LockAll under catalog.Exclusive) before moving anything.
package removal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// TrashDir is the trash directory beneath the Storage Root (and beneath
// $XDG_DATA_HOME/lazaret for images).
const TrashDir = ".trash"

// DomainsDir holds the Domain Roots beneath the Storage Root.
const DomainsDir = "domains"

// ImagesDir holds the built images beneath $XDG_DATA_HOME/lazaret.
const ImagesDir = "images"

// lockName is the Domain lifecycle lock beneath a Domain Root (see
// domain.Paths.LockFile).
const lockName = "lifecycle.lock"

// Failpoint stages (failpoint builds only), hit in the process that moves:
// "<Failpoint>moved" once every tree of the call is in the trash, before
// its deletion.
const Failpoint = "lazaret:rm:"

// Root is an opened Storage Root (or data directory): a descriptor every
// path is resolved beneath.
type Root struct {
	path string
	fd   int
}

// Open opens dir, which must be a directory owned by uid (not a symlink).
// found is false, with a nil error, when it does not exist.
func Open(dir string, uid int) (r *Root, found bool, err error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, false, nil
	}
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return nil, false, errdefs.New(errdefs.ErrRefused, "%s is not a directory (a symlink or a file is there): not removing anything through it", dir)
	}
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, false, &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	if int(st.Uid) != uid {
		unix.Close(fd)
		return nil, false, errdefs.New(errdefs.ErrRefused, "%s is owned by uid %d, not by you (uid %d): not removing anything in it", dir, st.Uid, uid)
	}
	return &Root{path: dir, fd: fd}, true, nil
}

// Close closes the descriptor.
func (r *Root) Close() {
	if r != nil && r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// Path is the path r was opened at (for messages).
func (r *Root) Path() string { return r.path }

// trash creates (if needed) and opens the trash directory.
func (r *Root) trash() (int, error) {
	fd, err := statetree.MkdirBeneath(r.fd, TrashDir, 0o700)
	if err != nil {
		return -1, fmt.Errorf("trash of %s: %w", r.path, err)
	}
	return fd, nil
}

// stamp names a trash entry: kind-name.<unix ns>.
func stamp(kind, name string, now time.Time) string {
	return kind + "-" + name + "." + strconv.FormatInt(now.UnixNano(), 10)
}

// MoveDomain moves the Domain Root domains/<id> into the trash with one
// rename and returns the trash entry's name; moved is false when there is
// no such Domain Root. lock, when not nil, is the Domain's lifecycle lock
// the caller holds: the Domain Root moved must be the one that lock is in
// (a Domain Root replaced since the caller locked it is refused).
func (r *Root) MoveDomain(id domain.ID, lock *os.File, now time.Time) (name string, moved bool, err error) {
	if !id.Valid() {
		return "", false, errdefs.New(errdefs.ErrInvalid, "malformed Domain ID %q", id)
	}
	dfd, err := statetree.OpenDir(r.fd, DomainsDir)
	if errors.Is(err, unix.ENOENT) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer unix.Close(dfd)
	root, err := statetree.OpenDir(dfd, string(id))
	if errors.Is(err, unix.ENOENT) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer unix.Close(root)
	if lock != nil {
		var held, there unix.Stat_t
		if err := unix.Fstat(int(lock.Fd()), &held); err != nil {
			return "", false, &os.PathError{Op: "fstat", Path: lock.Name(), Err: err}
		}
		if err := unix.Fstatat(root, lockName, &there, unix.AT_SYMLINK_NOFOLLOW); err != nil || held.Dev != there.Dev || held.Ino != there.Ino {
			return "", false, errdefs.New(errdefs.ErrRefused, "the Domain Root of %s was replaced while it was being locked: nothing removed; retry", id)
		}
	}
	tfd, err := r.trash()
	if err != nil {
		return "", false, err
	}
	defer unix.Close(tfd)
	name = stamp("domain", string(id), now)
	if err := statetree.Discard(dfd, string(id), tfd, name); err != nil {
		return "", false, fmt.Errorf("move Domain Root %s aside: %w", id, err)
	}
	return name, true, nil
}

// Entries lists the entries of r other than its trash, sorted.
func (r *Root) Entries() ([]string, error) {
	names, err := statetree.ReadNames(r.fd)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", r.path, err)
	}
	out := names[:0]
	for _, n := range names {
		if n != TrashDir {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// MoveEntry moves entry name of r (a file or a whole tree) into the trash
// with one rename and returns the trash entry's name; moved is false when
// there is no such entry.
func (r *Root) MoveEntry(name string, now time.Time) (string, bool, error) {
	if name == "" || name == "." || name == ".." || name == TrashDir || strings.Contains(name, "/") {
		return "", false, errdefs.New(errdefs.ErrInvalid, "%q is not an entry of %s that can be removed", name, r.path)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(r.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return "", false, nil
	}
	tfd, err := r.trash()
	if err != nil {
		return "", false, err
	}
	defer unix.Close(tfd)
	dst := stamp("root", name, now)
	if err := statetree.Discard(r.fd, name, tfd, dst); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("move %s aside: %w", name, err)
	}
	return dst, true, nil
}

// Moved hits the "moved" failpoint: every tree of this removal is in the
// trash, none is deleted yet.
func Moved() { failpoint.Hit(Failpoint + "moved") }

// TrashEntries counts what waits in r's trash.
func (r *Root) TrashEntries() (int, error) {
	tfd, err := statetree.OpenDir(r.fd, TrashDir)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	names, err := statetree.ReadNames(tfd)
	return len(names), err
}

// Purge deletes every entry of r's trash and returns how many there were.
//
// Preconditions: namespace root of the developer's user namespace when the
// trash may hold subordinate-id files (any Storage Root trash).
func (r *Root) Purge() (int, error) {
	return r.PurgeContext(context.Background())
}

// PurgeContext is Purge that stops before the next directory entry once
// ctx is done, with how many entries it deleted and ctx's error (wrapped);
// the rest stays in the trash for a later Purge.
func (r *Root) PurgeContext(ctx context.Context) (int, error) {
	tfd, err := statetree.OpenDir(r.fd, TrashDir)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	n, err := statetree.PurgeContext(ctx, tfd)
	if err != nil {
		return n, fmt.Errorf("delete the trash of %s: %w", r.path, err)
	}
	return n, nil
}

// RemoveIfEmpty removes r's empty trash and then r's directory itself when
// that is empty too (after `lazaret rm --all`); it reports whether the
// directory is gone. Something created meanwhile (a new `lazaret run`)
// keeps it.
func (r *Root) RemoveIfEmpty() (bool, error) {
	if err := unix.Unlinkat(r.fd, TrashDir, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT && err != unix.ENOTEMPTY && err != unix.EEXIST {
		return false, &os.PathError{Op: "rmdir", Path: r.path + "/" + TrashDir, Err: err}
	}
	names, err := statetree.ReadNames(r.fd)
	if err != nil || len(names) > 0 {
		return false, err
	}
	err = unix.Rmdir(r.path)
	if err == unix.ENOTEMPTY || err == unix.EEXIST {
		return false, nil
	}
	if err != nil && err != unix.ENOENT {
		return false, &os.PathError{Op: "rmdir", Path: r.path, Err: err}
	}
	return true, nil
}

// PurgeTrash deletes the trash of the Storage Root storageRoot (owned by
// uid: 0 as namespace root) and returns how many entries it deleted; a
// missing Storage Root or trash is nothing to do. Once ctx is done it stops
// before the next directory entry (Root.PurgeContext).
//
// Preconditions: namespace root of the developer's user namespace.
func PurgeTrash(ctx context.Context, storageRoot string, uid int) (int, error) {
	r, found, err := Open(storageRoot, uid)
	if err != nil || !found {
		return 0, err
	}
	defer r.Close()
	return r.PurgeContext(ctx)
}

// RemoveImages removes the built images, dataDir/images (dataDir is
// $XDG_DATA_HOME/lazaret, owned by uid): one rename into dataDir/.trash,
// then the deletion of that trash (finishing an earlier interrupted one),
// then dataDir itself if nothing else is left in it. found reports whether
// there were images.
func RemoveImages(dataDir string, uid int, now time.Time) (found bool, err error) {
	r, ok, err := Open(dataDir, uid)
	if err != nil || !ok {
		return false, err
	}
	defer r.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(r.fd, ImagesDir, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if _, found, err = r.MoveEntry(ImagesDir, now); err != nil {
			return false, err
		}
		Moved()
	}
	if _, err := r.Purge(); err != nil {
		return found, err
	}
	_, err = r.RemoveIfEmpty()
	return found, err
}

// PurgeImagesTrash finishes an interrupted RemoveImages of dataDir (owned
// by uid) and returns how many entries it deleted.
func PurgeImagesTrash(dataDir string, uid int) (int, error) {
	r, found, err := Open(dataDir, uid)
	if err != nil || !found {
		return 0, err
	}
	defer r.Close()
	n, err := r.Purge()
	if err != nil || n == 0 {
		return n, err
	}
	if err := unix.Unlinkat(r.fd, TrashDir, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT && err != unix.ENOTEMPTY {
		return n, &os.PathError{Op: "rmdir", Path: dataDir + "/" + TrashDir, Err: err}
	}
	return n, nil
}
