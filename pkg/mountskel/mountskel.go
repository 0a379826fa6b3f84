// Package mountskel provides the mount points the prepared lower lacks:
// runsc's gofer creates the mount point of every bind in the sandbox root
// on the host side and fails under the read-only prepared lower (or, under
// a State Anchor, would create it in the anchor's persistent upper). A bind
// at an arbitrary absolute path (a configured volume, a linked worktree's
// common Git directory at its own path) therefore needs its directory chain
// to exist before runsc starts.
//
// The Runtime Supervisor builds a per-generation skeleton directory holding
// just those chains (existing image directories copied with their owner and
// mode, so the merged view keeps them) and mounts the sandbox root as a
// read-only overlay of the skeleton over the prepared lower. State Anchors
// take their lower from that root, so the chains are visible beneath them
// too, as lower content: nothing is written to the shared, immutable
// prepared lower nor to a persistent upper, and the skeleton disappears
// with the generation.
package mountskel

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Point is one mount point to provide: an absolute guest path, a file when
// the bind's source is a regular file.
type Point struct {
	Path string
	File bool
}

// Needed returns the mount points of sp's bind mounts that hang off the
// sandbox root or a State Anchor (a bind whose source is beneath
// anchorDir) rather than off another Lazaret mount, and that the prepared
// lower (lowerRoot, opened beneath without following symlinks) lacks.
// A destination that crosses a symlink or a non-directory in the image is
// refused: the bind would land elsewhere than declared.
func Needed(sp *specs.Spec, lowerRoot, anchorDir string) ([]Point, error) {
	lfd, err := unix.Open(lowerRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open lower", Path: lowerRoot, Err: err}
	}
	defer unix.Close(lfd)
	var pts []Point
	for i, m := range sp.Mounts {
		if m.Type != "bind" || !path.IsAbs(m.Destination) || m.Destination == "/" {
			continue
		}
		if enc := enclosing(sp.Mounts[:i], m.Destination); enc != nil && !strings.HasPrefix(enc.Source, anchorDir+"/") {
			continue // beneath a workspace, control or volume mount
		}
		err := exists(lfd, m.Destination[1:])
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return nil, errdefs.New(errdefs.ErrRefused, "the mount point %s crosses a symlink or a file in the image (%v): choose a target path that is a plain directory path in the image", m.Destination, err)
		}
		file := false
		if st, err := os.Stat(m.Source); err == nil && st.Mode().IsRegular() {
			file = true
		}
		pts = append(pts, Point{Path: m.Destination, File: file})
	}
	return pts, nil
}

// enclosing returns the last of ms whose destination contains dst.
func enclosing(ms []specs.Mount, dst string) *specs.Mount {
	var best *specs.Mount
	for i := range ms {
		d := strings.TrimSuffix(ms[i].Destination, "/")
		if strings.HasPrefix(dst, d+"/") && (best == nil || len(d) >= len(best.Destination)) {
			best = &ms[i]
		}
	}
	return best
}

func exists(dirfd int, rel string) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		unix.Close(fd)
		return nil
	}
}

// Build creates the skeleton of pts in dir (which must not exist): every
// ancestor present in the lower is copied as a directory with the lower's
// owner and mode (the overlay shows the topmost layer's attributes), the
// missing rest is created root-owned, mode 0755 (an empty file for a file
// point).
//
// Preconditions: namespace root in the Runtime Supervisor's user namespace.
func Build(dir, lowerRoot string, pts []Point) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(lowerRoot, &st); err != nil {
		return &os.PathError{Op: "stat", Path: lowerRoot, Err: err}
	}
	if err := copyAttrs(dir, &st); err != nil {
		return err
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].Path < pts[j].Path })
	for _, p := range pts {
		parts := strings.Split(strings.Trim(p.Path, "/"), "/")
		for i := range parts {
			rel := strings.Join(parts[:i+1], "/")
			dst := filepath.Join(dir, rel)
			if _, err := os.Lstat(dst); err == nil {
				continue
			}
			last := i == len(parts)-1
			var lst unix.Stat_t
			err := unix.Lstat(filepath.Join(lowerRoot, rel), &lst)
			switch {
			case err == nil && lst.Mode&unix.S_IFMT == unix.S_IFDIR:
				if err := os.Mkdir(dst, 0o755); err != nil {
					return err
				}
				if err := copyAttrs(dst, &lst); err != nil {
					return err
				}
			case err == nil:
				return errdefs.New(errdefs.ErrRefused, "%s in the image is not a directory; the mount point %s cannot be provided", "/"+rel, p.Path)
			case last && p.File:
				f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				f.Close()
			default:
				if err := os.Mkdir(dst, 0o755); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func copyAttrs(p string, st *unix.Stat_t) error {
	if err := unix.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		return &os.PathError{Op: "chown", Path: p, Err: err}
	}
	if err := unix.Chmod(p, st.Mode&07777); err != nil {
		return &os.PathError{Op: "chmod", Path: p, Err: err}
	}
	return nil
}

// MountRoot mounts at target the read-only overlay of skel over lower (no
// upper: neither layer can be written through it).
//
// Preconditions: namespace root in the Runtime Supervisor's user+mount
// namespace.
func MountRoot(lower, skel, target string) error {
	lfd, err := unix.Open(lower, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open lower", Path: lower, Err: err}
	}
	defer unix.Close(lfd)
	sfd, err := unix.Open(skel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open skeleton", Path: skel, Err: err}
	}
	defer unix.Close(sfd)
	data := fmt.Sprintf("lowerdir=/proc/self/fd/%d:/proc/self/fd/%d,userxattr", sfd, lfd)
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY|unix.MS_NODEV, data); err != nil {
		return &os.PathError{Op: "mount skeleton overlay", Path: target, Err: err}
	}
	return nil
}
