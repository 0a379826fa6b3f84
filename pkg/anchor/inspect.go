package anchor

import (
	"errors"
	"path"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// Change is one entry of an upper layer, classified against the lower.
type Change struct {
	// Path is the guest path.
	Path string `json:"path"`
	// Kind: "added" (absent from the lower), "modified" (replaces a lower
	// entry), "deleted" (a whiteout) or "opaque" (a directory hiding the
	// lower's contents).
	Kind string `json:"kind"`
	// Type: file, dir, symlink, fifo, socket, device.
	Type string `json:"type"`
	Size int64  `json:"size"`
	// UID and GID are the entry's owner as guest ids (what `ls -n` shows
	// inside); -1 for a host owner outside the sandbox's map. A whiteout
	// has none (0).
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

// GuestIDs translates the host owners of upper entries into guest ids:
// the developer is guest root and subordinate id Start+k is guest k+1
// (the Runtime Supervisor's map with ocispec.IDMappings on top).
type GuestIDs struct {
	HostUID, HostGID   uint32
	UIDStart, GIDStart uint32
	// Count is the number of guest ids (ocispec.GuestIDs).
	Count uint32
}

func (g GuestIDs) guest(id, self, start uint32) int64 {
	switch {
	case id == self:
		return 0
	case id >= start && id-start < g.Count-1:
		return int64(id-start) + 1
	}
	return -1
}

// UID is the guest uid of host uid id (-1: outside the map).
func (g GuestIDs) UID(id uint32) int64 { return g.guest(id, g.HostUID, g.UIDStart) }

// GID is the guest gid of host gid id (-1: outside the map).
func (g GuestIDs) GID(id uint32) int64 { return g.guest(id, g.HostGID, g.GIDStart) }

// Inspection is the report of one State Anchor.
type Inspection struct {
	GuestPath string   `json:"guest_path"`
	Changes   []Change `json:"changes"`
	Bytes     int64    `json:"bytes"`
	// Unreadable lists upper directories the host user cannot read (their
	// files belong to a subordinate id with a private mode); their contents
	// are not classified.
	Unreadable []string `json:"unreadable,omitempty"`
}

// Inspect classifies the upper of the State Anchor for guestPath against
// lowerRoot (the prepared rootfs the next launch uses; "" to skip the
// comparison and report every regular entry as added), reporting owners
// as guest ids through ids. It prints no file
// contents, never follows a symlink (every directory is opened beneath its
// parent with RESOLVE_NO_SYMLINKS) and only reads.
func Inspect(domainRoot, guestPath, lowerRoot string, ids GuestIDs) (Inspection, error) {
	ins := Inspection{GuestPath: guestPath, Changes: []Change{}}
	name, err := Name(guestPath)
	if err != nil {
		return ins, err
	}
	afd, err := openAnchors(domainRoot, false)
	if errors.Is(err, unix.ENOENT) {
		return ins, nil
	}
	if err != nil {
		return ins, err
	}
	defer unix.Close(afd)
	fd, err := statetree.OpenDir(afd, name)
	if errors.Is(err, unix.ENOENT) {
		return ins, nil
	}
	if err != nil {
		return ins, err
	}
	defer unix.Close(fd)
	ufd, err := statetree.OpenDir(fd, upperName)
	if errors.Is(err, unix.ENOENT) {
		return ins, nil
	}
	if err != nil {
		return ins, err
	}
	defer unix.Close(ufd)
	lfd := -1
	if lowerRoot != "" {
		if r, err := unix.Open(lowerRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			if l, err := statetree.OpenBeneath(r, guestPath[1:], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
				lfd = l
			}
			unix.Close(r)
		}
	}
	if lfd >= 0 {
		defer unix.Close(lfd)
	}
	walk(ufd, lfd, guestPath, &ins, ids, 0)
	return ins, nil
}

// walk classifies the entries of upper directory ufd (lfd: the lower
// directory at the same path, or -1 when there is none).
func walk(ufd, lfd int, guest string, ins *Inspection, ids GuestIDs, depth int) {
	if depth > statetree.MaxDepth {
		return
	}
	names, err := statetree.ReadNames(ufd)
	if err != nil {
		ins.Unreadable = append(ins.Unreadable, guest)
		return
	}
	for _, n := range names {
		p := path.Join(guest, n)
		var st unix.Stat_t
		if err := unix.Fstatat(ufd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			ins.Unreadable = append(ins.Unreadable, p)
			continue
		}
		typ := statetree.FileType(st.Mode)
		inLower := false
		var lst unix.Stat_t
		if lfd >= 0 && unix.Fstatat(lfd, n, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil {
			inLower = true
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
			ins.Changes = append(ins.Changes, Change{Path: p, Kind: "deleted", Type: "whiteout"})
			continue
		}
		if typ != "dir" {
			kind := "added"
			if inLower {
				kind = "modified"
			}
			ins.Changes = append(ins.Changes, Change{Path: p, Kind: kind, Type: typ, Size: st.Size, UID: ids.UID(st.Uid), GID: ids.GID(st.Gid)})
			ins.Bytes += st.Size
			continue
		}
		dfd, err := statetree.OpenBeneath(ufd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if err != nil {
			ins.Unreadable = append(ins.Unreadable, p)
			continue
		}
		opaque := isOpaque(dfd)
		childLower := -1
		uid, gid := ids.UID(st.Uid), ids.GID(st.Gid)
		switch {
		case opaque:
			ins.Changes = append(ins.Changes, Change{Path: p, Kind: "opaque", Type: "dir", UID: uid, GID: gid})
		case !inLower:
			ins.Changes = append(ins.Changes, Change{Path: p, Kind: "added", Type: "dir", UID: uid, GID: gid})
		case lst.Mode&unix.S_IFMT == unix.S_IFDIR:
			childLower, _ = statetree.OpenBeneath(lfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		default:
			ins.Changes = append(ins.Changes, Change{Path: p, Kind: "modified", Type: "dir", UID: uid, GID: gid})
		}
		walk(dfd, childLower, p, ins, ids, depth+1)
		if childLower >= 0 {
			unix.Close(childLower)
		}
		unix.Close(dfd)
	}
}

// isOpaque reads the overlay's opaque marker (user.overlay.opaque with
// userxattr).
func isOpaque(dirfd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(dirfd, "user.overlay.opaque", buf)
	return err == nil && n > 0 && (buf[0] == 'y' || buf[0] == 'x')
}
