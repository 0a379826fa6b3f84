package statetree

import (
	"fmt"
	"path"
	"sort"

	"golang.org/x/sys/unix"
)

// Finding kinds reported by structural verification (stable identifiers of
// the JSON report).
const (
	// FindStructure: a missing, misplaced or unexpected entry of the layout.
	FindStructure = "structure"
	// FindRecord: a missing, malformed or newer-versioned record.
	FindRecord = "record"
	// FindEscape: a symlink or another filesystem where the layout has a
	// directory (never followed).
	FindEscape = "escape"
	// FindOwner: an entry owned by an id that is neither the developer nor
	// one of the developer's subordinate ids.
	FindOwner = "owner"
	// FindDevice: a device node other than an overlay whiteout (char 0/0).
	FindDevice = "device"
	// FindSetID: a setuid or setgid regular file owned by the developer's
	// host user (or group).
	FindSetID = "setid"
	// FindHardLink: a file with more links than the verified trees hold:
	// it is also linked from somewhere else.
	FindHardLink = "hardlink"
	// FindWork: an overlay work directory that is not empty.
	FindWork = "work-not-empty"
	// FindUnreadable: an entry the verifier could not read.
	FindUnreadable = "unreadable"
	// FindPending: an interrupted reset or record write.
	FindPending = "reset-pending"
)

// Finding is one problem found by verification.
type Finding struct {
	Kind string `json:"kind"`
	// Path is relative to the Domain Root.
	Path   string `json:"path"`
	Detail string `json:"detail"`
}

// Counts summarises what a verified tree holds.
type Counts struct {
	Files    int64 `json:"files"`
	Dirs     int64 `json:"dirs"`
	Symlinks int64 `json:"symlinks"`
	// Whiteouts are overlay whiteouts (char 0/0) in an upper.
	Whiteouts int64 `json:"whiteouts,omitempty"`
	Bytes     int64 `json:"bytes"`
}

// Checker walks state trees and collects findings. Symlinks are counted as
// data and never followed; directories are opened beneath their parent
// with RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV, so the walk stays on the Domain
// Root's filesystem.
type Checker struct {
	// OwnerOK reports whether uid/gid (as the walking process sees them)
	// belong to the developer or the developer's subordinate ids.
	OwnerOK func(uid, gid uint32) bool
	// HostUID and HostGID are the developer's ids as the walker sees them
	// (0 inside the Domain's user namespace).
	HostUID, HostGID uint32
	// Describe turns an id as seen by the walker into the text a finding
	// shows (e.g. the host id); nil prints it as is.
	Describe func(id uint32, group bool) string

	Findings []Finding
	links    map[[2]uint64]*link
}

type link struct {
	seen  uint64
	nlink uint64
	path  string
}

// Add records a finding.
func (c *Checker) Add(kind, p, format string, args ...any) {
	c.Findings = append(c.Findings, Finding{Kind: kind, Path: p, Detail: fmt.Sprintf(format, args...)})
}

func (c *Checker) describe(id uint32, group bool) string {
	if c.Describe != nil {
		return c.Describe(id, group)
	}
	if group {
		return fmt.Sprintf("gid %d", id)
	}
	return fmt.Sprintf("uid %d", id)
}

// Tree verifies the directory dirfd, shown as rel (relative to the Domain
// Root), and everything beneath it. whiteouts allows overlay whiteouts
// (char 0/0). The directory itself is checked too.
func (c *Checker) Tree(dirfd int, rel string, whiteouts bool) Counts {
	var n Counts
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		c.Add(FindUnreadable, rel, "%v", err)
		return n
	}
	c.owner(rel, &st)
	c.walk(dirfd, st.Dev, rel, whiteouts, &n, 0)
	return n
}

func (c *Checker) owner(p string, st *unix.Stat_t) {
	if c.OwnerOK != nil && !c.OwnerOK(st.Uid, st.Gid) {
		c.Add(FindOwner, p, "owned by %s / %s, which is neither your user nor one of your subordinate ids (something outside Lazaret wrote it)", c.describe(st.Uid, false), c.describe(st.Gid, true))
	}
}

func (c *Checker) walk(dirfd int, dev uint64, rel string, whiteouts bool, n *Counts, depth int) {
	if depth > MaxDepth {
		c.Add(FindStructure, rel, "directory nesting deeper than %d", MaxDepth)
		return
	}
	n.Dirs++
	names, err := ReadNames(dirfd)
	if err != nil {
		c.Add(FindUnreadable, rel, "cannot list: %v", err)
		return
	}
	sort.Strings(names)
	for _, name := range names {
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.Add(FindUnreadable, p, "cannot stat: %v", err)
			continue
		}
		c.owner(p, &st)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if st.Dev != dev {
				c.Add(FindEscape, p, "another filesystem is mounted here; not entered")
				continue
			}
			fd, err := OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
			if err != nil {
				c.Add(FindUnreadable, p, "cannot open: %v", err)
				continue
			}
			c.walk(fd, dev, p, whiteouts, n, depth+1)
			unix.Close(fd)
		case unix.S_IFLNK:
			n.Symlinks++ // data: the sandbox resolves it inside the sandbox
		case unix.S_IFREG:
			n.Files++
			n.Bytes += st.Size
			if st.Mode&unix.S_ISUID != 0 && st.Uid == c.HostUID {
				c.Add(FindSetID, p, "setuid file owned by your host user (mode %04o): outside the sandbox it would run as you", st.Mode&0o7777)
			} else if st.Mode&unix.S_ISGID != 0 && st.Gid == c.HostGID {
				c.Add(FindSetID, p, "setgid file owned by your host group (mode %04o): outside the sandbox it would run with your group", st.Mode&0o7777)
			}
			if st.Nlink > 1 {
				if c.links == nil {
					c.links = map[[2]uint64]*link{}
				}
				k := [2]uint64{st.Dev, st.Ino}
				l := c.links[k]
				if l == nil {
					l = &link{nlink: uint64(st.Nlink), path: p}
					c.links[k] = l
				}
				l.seen++
			}
		case unix.S_IFCHR:
			if whiteouts && st.Rdev == 0 {
				n.Whiteouts++
				continue
			}
			c.Add(FindDevice, p, "character device %d:%d (only overlay whiteouts, 0:0 in an upper, belong here)", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case unix.S_IFBLK:
			c.Add(FindDevice, p, "block device %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case unix.S_IFIFO, unix.S_IFSOCK:
			n.Files++
		default:
			c.Add(FindStructure, p, "unexpected file type %#o", st.Mode&unix.S_IFMT)
		}
	}
}

// Finish reports the hard links whose other names lie outside every tree
// walked with this Checker. Call it once after the last Tree.
func (c *Checker) Finish() {
	var ls []*link
	for _, l := range c.links {
		if l.seen < l.nlink {
			ls = append(ls, l)
		}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].path < ls[j].path })
	for _, l := range ls {
		c.Add(FindHardLink, l.path, "has %d links, %d of them in the verified state: it is also linked from outside (a change there changes it here)", l.nlink, l.seen)
	}
	c.links = nil
}

// EmptyWork checks an overlay work directory: only the kernel's own "work"
// and "index" subdirectories belong in it once unmounted, empty but for the
// kernel's shared whiteout (a char 0/0 "#<hex>" in work/work that the
// overlay hard-links whiteouts from; the next mount cleans it).
func (c *Checker) EmptyWork(dirfd int, rel string) {
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err == nil {
		c.owner(rel, &st)
	}
	names, err := ReadNames(dirfd)
	if err != nil {
		c.Add(FindUnreadable, rel, "cannot list: %v", err)
		return
	}
	sort.Strings(names)
	for _, name := range names {
		p := path.Join(rel, name)
		if name != "work" && name != "index" {
			c.Add(FindWork, p, "left in the overlay work directory")
			continue
		}
		fd, err := OpenDir(dirfd, name)
		if err != nil {
			c.Add(FindWork, p, "not a plain directory: %v", err)
			continue
		}
		inner, err := ReadNames(fd)
		if err != nil {
			unix.Close(fd)
			c.Add(FindUnreadable, p, "cannot list: %v", err)
			continue
		}
		left := 0
		for _, n := range inner {
			var ist unix.Stat_t
			if name == "work" && len(n) > 1 && n[0] == '#' && unix.Fstatat(fd, n, &ist, unix.AT_SYMLINK_NOFOLLOW) == nil &&
				ist.Mode&unix.S_IFMT == unix.S_IFCHR && ist.Rdev == 0 {
				continue // the shared whiteout
			}
			left++
		}
		unix.Close(fd)
		if left > 0 {
			c.Add(FindWork, p, "holds %d leftover entr(ies) of an interrupted overlay operation", left)
		}
	}
}
