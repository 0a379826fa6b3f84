package ignoredstate

import (
	"path"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// Change is one difference between the sandbox's view of an ignored path
// (the state) and the host's content at the same path, which the sandbox
// never sees.
type Change struct {
	// Path is workspace-relative.
	Path string `json:"path"`
	// Kind: "added" (in the state, not on the host), "modified" (on both,
	// differing in type, size or modification time; contents are not
	// read) or "deleted" (on the host, absent from the sandbox's view).
	Kind string `json:"kind"`
	Type string `json:"type"`
	// Size is the file's size, or the bytes of files beneath an added or
	// deleted directory (reported as one change).
	Size int64 `json:"size"`
}

// Inspection is the report of one ignored path.
type Inspection struct {
	Path    string   `json:"path"`
	Stale   bool     `json:"stale,omitempty"`
	Changes []Change `json:"changes"`
	Bytes   int64    `json:"bytes"`
	// Unreadable lists paths the caller could not read.
	Unreadable []string `json:"unreadable,omitempty"`
}

// Inspect compares the state of entry e (from List) with the host's
// workspace (ws: its directory, opened read-only; every host path is
// resolved beneath it without following symlinks). It prints no contents
// and only reads.
func Inspect(domainRoot, ws string, e Entry, ignored Classifier) (Inspection, error) {
	ins := Inspection{Path: e.Path, Stale: e.Stale, Changes: []Change{}}
	sfd, err := openState(domainRoot)
	if sfd < 0 || err != nil {
		return ins, err
	}
	defer unix.Close(sfd)
	hfd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ins, err
	}
	defer unix.Close(hfd)
	parent, name := path.Split(e.Path)
	sp, hp := sfd, hfd
	if parent != "" {
		if sp, err = statetree.OpenDir(sfd, path.Clean(parent)); err != nil {
			return ins, err
		}
		defer unix.Close(sp)
		if hp, err = statetree.OpenDir(hfd, path.Clean(parent)); err != nil {
			hp = -1
		} else {
			defer unix.Close(hp)
		}
	}
	compare(sp, hp, name, e.Path, ignored, &ins, 0)
	sort.Slice(ins.Changes, func(i, j int) bool { return ins.Changes[i].Path < ins.Changes[j].Path })
	return ins, nil
}

// compare classifies entry name of state directory sdir against host
// directory hdir (-1: none).
func compare(sdir, hdir int, name, rel string, ignored Classifier, ins *Inspection, depth int) {
	var sst, hst unix.Stat_t
	if err := unix.Fstatat(sdir, name, &sst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		ins.Unreadable = append(ins.Unreadable, rel)
		return
	}
	onHost := hdir >= 0 && unix.Fstatat(hdir, name, &hst, unix.AT_SYMLINK_NOFOLLOW) == nil
	styp := statetree.FileType(sst.Mode)
	if !onHost {
		e := Entry{}
		size(sdir, name, &sst, &e, 0)
		ins.Changes = append(ins.Changes, Change{Path: rel, Kind: "added", Type: styp, Size: e.Bytes})
		ins.Bytes += e.Bytes
		ins.Unreadable = append(ins.Unreadable, prefixed(rel, e.Unreadable)...)
		return
	}
	if styp != "dir" || statetree.FileType(hst.Mode) != "dir" {
		if styp != statetree.FileType(hst.Mode) || sst.Size != hst.Size || sst.Mtim != hst.Mtim {
			e := Entry{}
			size(sdir, name, &sst, &e, 0)
			ins.Changes = append(ins.Changes, Change{Path: rel, Kind: "modified", Type: styp, Size: e.Bytes})
			ins.Bytes += e.Bytes
		} else {
			ins.Bytes += sst.Size
		}
		return
	}
	if depth > statetree.MaxDepth {
		return
	}
	sfd, err := statetree.OpenBeneath(sdir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		ins.Unreadable = append(ins.Unreadable, rel)
		return
	}
	defer unix.Close(sfd)
	hfd, err := statetree.OpenBeneath(hdir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		hfd = -1
	} else {
		defer unix.Close(hfd)
	}
	snames, err := statetree.ReadNames(sfd)
	if err != nil {
		ins.Unreadable = append(ins.Unreadable, rel)
		return
	}
	inState := map[string]bool{}
	for _, n := range snames {
		inState[n] = true
		compare(sfd, hfd, n, path.Join(rel, n), ignored, ins, depth+1)
	}
	if hfd < 0 {
		return
	}
	hnames, err := statetree.ReadNames(hfd)
	if err != nil {
		return
	}
	for _, n := range hnames {
		if inState[n] {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(hfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		p := path.Join(rel, n)
		if !ignored(p, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			continue // tracked or not ignored: the sandbox sees the host's
		}
		e := Entry{}
		size(hfd, n, &st, &e, 0)
		ins.Changes = append(ins.Changes, Change{Path: p, Kind: "deleted", Type: statetree.FileType(st.Mode), Size: e.Bytes})
	}
}

func prefixed(rel string, names []string) []string {
	var out []string
	for _, n := range names {
		if n == path.Base(rel) {
			out = append(out, rel)
		} else {
			out = append(out, path.Join(path.Dir(rel), n))
		}
	}
	return out
}
