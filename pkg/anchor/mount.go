package anchor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/mountns"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// MountIdentity names one State Anchor mount exactly: the mount namespace it
// lives in (nsfs inode of the Runtime Supervisor's namespace), the mount's
// unique ID (statx STATX_MNT_ID_UNIQUE, never reused while the system runs),
// its mount point and its upper directory. Two mounts with the same unique
// ID are the same mount.
type MountIdentity struct {
	GuestPath  string `json:"guest_path"`
	Target     string `json:"target"`
	Upper      string `json:"upper"`
	MountNSIno uint64 `json:"mount_ns_ino"`
	MountID    uint64 `json:"mount_id"`
}

// Notice is something the developer should hear about a mounted anchor.
type Notice struct {
	GuestPath string
	// ImageChanged: the upper was written over another prepared artifact.
	ImageChanged bool
	WrittenOver  string
}

// ErrMissingInImage marks a persistent path absent from (or not a plain
// directory in) the prepared lower.
var ErrMissingInImage = errors.New("persistent path not a directory in the image")

// Mount mounts the State Anchor for guestPath at target: an overlay of the
// directory guestPath beneath lowerRoot (the read-only bind of the prepared
// rootfs; opened with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so a symlink in
// the image cannot redirect it) under the Domain's upper. artifactID is the
// prepared lower's ID, recorded when the upper is still empty.
//
// Preconditions: namespace root in the Domain's user+mount namespace.
func Mount(domainRoot, lowerRoot, guestPath, target, artifactID string, now func() time.Time) (MountIdentity, *Notice, error) {
	name, err := Name(guestPath)
	if err != nil {
		return MountIdentity{}, nil, err
	}
	lfd, err := unix.Open(lowerRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return MountIdentity{}, nil, &os.PathError{Op: "open lower", Path: lowerRoot, Err: err}
	}
	defer unix.Close(lfd)
	lower, err := statetree.OpenBeneath(lfd, guestPath[1:], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return MountIdentity{}, nil, errdefs.Mark(fmt.Errorf("%w: %s in the prepared lower (%v): make it a directory in the image (a symlink does not count) or remove it from persistent_paths", ErrMissingInImage, guestPath, err), errdefs.ErrInvalid)
	}
	defer unix.Close(lower)
	var lst unix.Stat_t
	if err := unix.Fstat(lower, &lst); err != nil {
		return MountIdentity{}, nil, err
	}

	afd, err := openAnchors(domainRoot, true)
	if err != nil {
		return MountIdentity{}, nil, err
	}
	defer unix.Close(afd)
	fd, err := statetree.MkdirBeneath(afd, name, 0o700)
	if err != nil {
		return MountIdentity{}, nil, err
	}
	defer unix.Close(fd)
	ufd, err := statetree.MkdirBeneath(fd, upperName, 0o755)
	if err != nil {
		return MountIdentity{}, nil, err
	}
	defer unix.Close(ufd)
	wfd, err := statetree.MkdirBeneath(fd, workName, 0o700)
	if err != nil {
		return MountIdentity{}, nil, err
	}
	unix.Close(wfd)
	entries, err := statetree.ReadNames(ufd)
	if err != nil {
		return MountIdentity{}, nil, err
	}
	rec, err := readRecord(fd)
	if errors.Is(err, unix.ENOENT) {
		rec, err = &Record{GuestPath: guestPath, Created: now().UTC()}, nil
	}
	if err != nil {
		return MountIdentity{}, nil, fmt.Errorf("anchor %s: %w", guestPath, err)
	}
	if rec.GuestPath != guestPath {
		return MountIdentity{}, nil, errdefs.New(errdefs.ErrCorrupt, "anchor %s records guest path %q", name, rec.GuestPath)
	}
	var notice *Notice
	if len(entries) == 0 {
		// An empty upper persists nothing yet: its root takes the lower
		// directory's owner and mode (the merged root shows the upper's),
		// and it is now written over this artifact.
		if err := unix.Fchown(ufd, int(lst.Uid), int(lst.Gid)); err != nil {
			return MountIdentity{}, nil, &os.PathError{Op: "fchown upper", Path: guestPath, Err: err}
		}
		if err := unix.Fchmod(ufd, lst.Mode&07777); err != nil {
			return MountIdentity{}, nil, &os.PathError{Op: "fchmod upper", Path: guestPath, Err: err}
		}
		if rec.WrittenOver != artifactID {
			rec.WrittenOver = artifactID
			if err := writeRecord(fd, rec); err != nil {
				return MountIdentity{}, nil, err
			}
		}
	} else if rec.WrittenOver != artifactID {
		notice = &Notice{GuestPath: guestPath, ImageChanged: true, WrittenOver: rec.WrittenOver}
	}
	if _, err := os.Stat(filepath.Join(domainRoot, Dir, name, swapName)); err == nil {
		return MountIdentity{}, nil, errdefs.New(errdefs.ErrRefused, "anchor %s has an unfinished reset (upper.swap): it must be moved to the trash first", guestPath)
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return MountIdentity{}, nil, err
	}
	upper := filepath.Join(domainRoot, Dir, name, upperName)
	work := filepath.Join(domainRoot, Dir, name, workName)
	// Upper and work by path (verified above to be plain directories beneath
	// the 0700, developer-owned Domain Root) so that mountinfo names them;
	// the lower by its verified descriptor.
	data := fmt.Sprintf("lowerdir=/proc/self/fd/%d,upperdir=%s,workdir=%s,userxattr", lower, upper, work)
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV, data); err != nil {
		return MountIdentity{}, nil, &os.PathError{Op: "mount overlay (" + guestPath + ")", Path: target, Err: err}
	}
	id, err := observe(target)
	if err != nil {
		unix.Unmount(target, unix.MNT_DETACH)
		return MountIdentity{}, nil, err
	}
	id.GuestPath, id.Upper = guestPath, upper
	return id, notice, nil
}

// observe reads the mount identity at target: its namespace and the unique
// mount ID of the mount whose root is target, checking it is an overlay.
func observe(target string) (MountIdentity, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(target, &sfs); err != nil {
		return MountIdentity{}, &os.PathError{Op: "statfs", Path: target, Err: err}
	}
	if sfs.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return MountIdentity{}, errdefs.New(errdefs.ErrRefused, "%s is not an overlay mount (filesystem type %#x)", target, sfs.Type)
	}
	mid, err := mountID(target)
	if err != nil {
		return MountIdentity{}, err
	}
	ns, err := MountNamespace()
	if err != nil {
		return MountIdentity{}, err
	}
	return MountIdentity{Target: target, MountNSIno: ns, MountID: mid}, nil
}

// MountNamespace is the nsfs inode of the caller's mount namespace.
func MountNamespace() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: "/proc/self/ns/mnt", Err: err}
	}
	return st.Ino, nil
}

// mountID is the unique ID of the mount target is on.
func mountID(target string) (uint64, error) { return mountns.MountID(unix.AT_FDCWD, target) }

// Unmount verifies that the mount at id.Target in this namespace is exactly
// id and unmounts it, then observes independently that it is absent (the
// mount point now shows another mount ID). A mismatch refuses and leaves
// the mount untouched.
//
// Preconditions: namespace root in the namespace that holds the mount.
func Unmount(id MountIdentity) error {
	if err := Matches(id); err != nil {
		return err
	}
	if err := unix.Unmount(id.Target, 0); err != nil {
		if err != unix.EBUSY {
			return &os.PathError{Op: "unmount", Path: id.Target, Err: err}
		}
		// Busy (a lingering reference): detach; absence is checked below.
		if err := unix.Unmount(id.Target, unix.MNT_DETACH); err != nil {
			return &os.PathError{Op: "unmount (detach)", Path: id.Target, Err: err}
		}
	}
	return Absent(id)
}

// Matches checks that the mount at id.Target in the caller's namespace is id.
func Matches(id MountIdentity) error {
	ns, err := MountNamespace()
	if err != nil {
		return err
	}
	if ns != id.MountNSIno {
		return errdefs.New(errdefs.ErrRefused, "State Anchor %s was mounted in mount namespace %d, this is %d: not unmounting", id.GuestPath, id.MountNSIno, ns)
	}
	mid, err := mountID(id.Target)
	if err != nil {
		return err
	}
	if mid != id.MountID {
		return errdefs.New(errdefs.ErrRefused, "State Anchor %s: mount at %s has ID %d, recorded %d: not unmounting a mount Lazaret did not record", id.GuestPath, id.Target, mid, id.MountID)
	}
	return nil
}

// Absent observes, in the caller's namespace, that the exact mount id is no
// longer at its mount point.
func Absent(id MountIdentity) error {
	ns, err := MountNamespace()
	if err != nil {
		return err
	}
	if ns != id.MountNSIno {
		return errdefs.New(errdefs.ErrRefused, "absence of State Anchor mount %d cannot be observed from mount namespace %d (it lives in %d)", id.MountID, ns, id.MountNSIno)
	}
	mid, err := mountID(id.Target)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if mid == id.MountID {
		return errdefs.New(errdefs.ErrRefused, "State Anchor %s: mount %d is still at %s", id.GuestPath, id.MountID, id.Target)
	}
	return nil
}
