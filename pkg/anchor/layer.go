package anchor

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// Whiteout names of the OCI image layer format: a deleted entry NAME is the
// empty file .wh.NAME; a directory whose lower contents are hidden holds
// .wh..wh..opq.
const (
	WhiteoutPrefix = ".wh."
	WhiteoutOpaque = ".wh..wh..opq"
)

// IDMap translates an owner id as the exporter sees it (in its user
// namespace) into the guest id the layer records; ok false refuses it.
type IDMap func(id uint32) (guest uint32, ok bool)

// LayerStats counts what ExportLayer wrote and left out.
type LayerStats struct {
	Anchors   int   `json:"anchors"`
	Files     int   `json:"files"`
	Dirs      int   `json:"dirs"`
	Symlinks  int   `json:"symlinks"`
	Hardlinks int   `json:"hardlinks"`
	Whiteouts int   `json:"whiteouts"`
	Opaque    int   `json:"opaque"`
	Bytes     int64 `json:"bytes"`
	// Skipped counts device nodes (other than whiteouts) and sockets,
	// which a layer never carries.
	Skipped int `json:"skipped"`
	// SetIDDropped counts files whose setuid/setgid bits were cleared
	// (the sandbox runs with no_new_privs: they would do nothing).
	SetIDDropped int `json:"setid_dropped"`
}

// ExportLayer writes the changes held in the State Anchor uppers of
// domainRoot as one OCI image layer (an uncompressed tar stream) to tw:
// every upper's entries beneath its guest path, overlay whiteouts (char
// 0/0) as .wh.NAME entries, opaque directories (user.overlay.opaque, the
// userxattr form) with a .wh..wh..opq entry, owners translated by ids,
// hard links within the layer as tar links. Device nodes and sockets are
// left out and counted, setuid/setgid bits cleared, extended attributes
// not carried. Entries come in a fixed order (anchors by guest path,
// names sorted), a directory before its contents. Nothing is followed:
// every entry is opened beneath its directory without symlinks.
//
// Preconditions: no overlay is mounted over the uppers (the Domain is
// stopped and its lock held), and the caller can read every upper (namespace
// root of the Domain's user namespace).
func ExportLayer(domainRoot string, tw *tar.Writer, ids IDMap) (LayerStats, error) {
	var st LayerStats
	afd, names, err := readAnchors(domainRoot)
	if err != nil || afd < 0 {
		return st, err
	}
	defer unix.Close(afd)
	type anc struct{ name, guest string }
	var list []anc
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			continue
		}
		gp, err := GuestPath(n)
		if err != nil {
			return st, err
		}
		list = append(list, anc{n, gp})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].guest < list[j].guest })
	x := &exporter{tw: tw, ids: ids, st: &st, links: map[[2]uint64]string{}}
	for _, a := range list {
		fd, err := statetree.OpenDir(afd, a.name)
		if err != nil {
			return st, err
		}
		ufd, err := statetree.OpenDir(fd, upperName)
		unix.Close(fd)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("anchor %s: %w", a.guest, err)
		}
		st.Anchors++
		rel := strings.TrimPrefix(a.guest, "/")
		var ust unix.Stat_t
		if err := unix.Fstat(ufd, &ust); err != nil {
			unix.Close(ufd)
			return st, err
		}
		err = x.dir(ufd, rel, &ust, 0)
		unix.Close(ufd)
		if err != nil {
			return st, fmt.Errorf("anchor %s: %w", a.guest, err)
		}
	}
	return st, nil
}

type exporter struct {
	tw    *tar.Writer
	ids   IDMap
	st    *LayerStats
	links map[[2]uint64]string // (dev, ino) of a multiply linked file → its first name
}

// header fills the common fields of entry rel from st.
func (x *exporter) header(rel string, st *unix.Stat_t) (*tar.Header, error) {
	uid, ok := x.ids(st.Uid)
	if !ok {
		return nil, errdefs.New(errdefs.ErrRefused, "/%s is owned by uid %d, which is no guest id: run `lazaret state verify` on the build Domain", rel, st.Uid)
	}
	gid, ok := x.ids(st.Gid)
	if !ok {
		return nil, errdefs.New(errdefs.ErrRefused, "/%s is owned by gid %d, which is no guest id", rel, st.Gid)
	}
	mode := int64(st.Mode & 0o7777)
	if st.Mode&unix.S_IFMT == unix.S_IFREG && mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	return &tar.Header{
		Name: rel, Mode: mode, Uid: int(uid), Gid: int(gid),
		ModTime: time.Unix(st.Mtim.Sec, 0).UTC(), Format: tar.FormatPAX,
	}, nil
}

// dir writes directory rel (open as fd, status st) and its contents.
func (x *exporter) dir(fd int, rel string, st *unix.Stat_t, depth int) error {
	if depth > statetree.MaxDepth {
		return errdefs.New(errdefs.ErrRefused, "/%s: deeper than %d directories", rel, statetree.MaxDepth)
	}
	h, err := x.header(rel+"/", st)
	if err != nil {
		return err
	}
	h.Typeflag = tar.TypeDir
	if err := x.tw.WriteHeader(h); err != nil {
		return err
	}
	x.st.Dirs++
	if isOpaque(fd) {
		if err := x.tw.WriteHeader(&tar.Header{Name: rel + "/" + WhiteoutOpaque, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: h.ModTime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		x.st.Opaque++
	}
	names, err := statetree.ReadNames(fd)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if err := x.entry(fd, n, path.Join(rel, n), depth); err != nil {
			return err
		}
	}
	return nil
}

// entry writes one directory entry.
func (x *exporter) entry(dirfd int, name, rel string, depth int) error {
	if strings.HasPrefix(name, WhiteoutPrefix) {
		return errdefs.New(errdefs.ErrRefused, "/%s: a file name starting with %s cannot be carried in an image layer (it means a deletion there): rename it in a recipe step", rel, WhiteoutPrefix)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "fstatat", Path: "/" + rel, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			x.st.Skipped++
			return nil
		}
		// An overlay whiteout: the entry was deleted.
		x.st.Whiteouts++
		wh := path.Join(path.Dir(rel), WhiteoutPrefix+name)
		return x.tw.WriteHeader(&tar.Header{Name: wh, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: time.Unix(st.Mtim.Sec, 0).UTC(), Format: tar.FormatPAX})
	case unix.S_IFBLK, unix.S_IFSOCK:
		x.st.Skipped++
		return nil
	case unix.S_IFDIR:
		fd, err := statetree.OpenDir(dirfd, name)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return x.dir(fd, rel, &st, depth+1)
	}
	h, err := x.header(rel, &st)
	if err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return &os.PathError{Op: "readlinkat", Path: "/" + rel, Err: err}
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, string(buf[:n])
		x.st.Symlinks++
		return x.tw.WriteHeader(h)
	case unix.S_IFIFO:
		h.Typeflag = tar.TypeFifo
		return x.tw.WriteHeader(h)
	case unix.S_IFREG:
	default:
		x.st.Skipped++
		return nil
	}
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := x.links[key]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			x.st.Hardlinks++
			return x.tw.WriteHeader(h)
		}
		x.links[key] = rel
	}
	fd, err := statetree.OpenBeneath(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := x.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(x.tw, io.LimitReader(f, st.Size))
	if err != nil {
		return fmt.Errorf("/%s: %w", rel, err)
	}
	if n != st.Size {
		return errdefs.New(errdefs.ErrUnavailable, "/%s changed size while it was read (%d of %d bytes): is the build Domain still running?", rel, n, st.Size)
	}
	x.st.Files++
	x.st.Bytes += n
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		x.st.SetIDDropped++
	}
	return nil
}
