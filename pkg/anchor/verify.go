package anchor

import (
	"errors"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// Verification is the structural verification report of one State Anchor
// (`lazaret state verify`, spec §3.8).
type Verification struct {
	Name      string `json:"name"`
	GuestPath string `json:"guest_path,omitempty"`
	statetree.Counts
	Findings []statetree.Finding `json:"findings"`
}

// Verify checks the structure of every State Anchor of the Domain Root
// with c: each anchor directory has a valid, version-checked anchor.json
// matching its name, an upper/ and a work/ directory and nothing else
// (upper.swap reports an interrupted reset); the upper's entries are owned
// by the developer or its subordinate ids, hold no device node but overlay
// whiteouts, no setuid/setgid file of the host user, no hard link to
// outside and no other filesystem; the work directory is empty. Nothing is
// followed: a symlink where the layout has a directory is a finding. Findings
// that concern no single anchor (the anchors directory itself, stray
// entries) are returned in general.
//
// Preconditions: the Domain is inactive and its lifecycle lock is held;
// run as namespace root of the Domain's user namespace so that
// subordinate-uid directories can be read.
func Verify(domainRoot string, c *statetree.Checker) (anchors []Verification, general []statetree.Finding, err error) {
	root, err := domainRootFD(domainRoot)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(root)
	afd, err := statetree.OpenDir(root, Dir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, []statetree.Finding{{Kind: statetree.FindEscape, Path: Dir, Detail: err.Error()}}, nil
	}
	defer unix.Close(afd)
	saved := c.Findings
	c.Findings = nil
	defer func() { c.Findings = saved }()
	var st unix.Stat_t
	if err := unix.Fstat(afd, &st); err == nil && c.OwnerOK != nil && !c.OwnerOK(st.Uid, st.Gid) {
		c.Add(statetree.FindOwner, Dir, "the anchors directory is not owned by your user")
	}
	names, err := statetree.ReadNames(afd)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	for _, n := range names {
		if n == trashDir {
			if ok, err := statetree.IsDir(afd, n); !ok || err != nil {
				c.Add(statetree.FindEscape, path.Join(Dir, n), "the reset trash is not a plain directory: %v", err)
			}
			continue // discarded state, deleted by the next run
		}
		start := len(c.Findings)
		v := verifyAnchor(afd, n, c)
		v.Findings = append([]statetree.Finding{}, c.Findings[start:]...)
		c.Findings = c.Findings[:start]
		anchors = append(anchors, v)
	}
	return anchors, c.Findings, nil
}

// AttachLinks moves hard-link findings (reported by Checker.Finish after
// every tree is walked) to the anchor they concern.
func AttachLinks(anchors []Verification, findings []statetree.Finding) (rest []statetree.Finding) {
	for _, f := range findings {
		placed := false
		for i := range anchors {
			if strings.HasPrefix(f.Path, path.Join(Dir, anchors[i].Name)+"/") {
				anchors[i].Findings = append(anchors[i].Findings, f)
				placed = true
				break
			}
		}
		if !placed {
			rest = append(rest, f)
		}
	}
	return rest
}

func verifyAnchor(afd int, n string, c *statetree.Checker) Verification {
	rel := path.Join(Dir, n)
	v := Verification{Name: n, Findings: []statetree.Finding{}}
	gp, err := GuestPath(n)
	if err != nil {
		c.Add(statetree.FindStructure, rel, "not a State Anchor: %v; remove it (it is not Lazaret's)", err)
		return v
	}
	v.GuestPath = gp
	fd, err := statetree.OpenDir(afd, n)
	if err != nil {
		c.Add(statetree.FindEscape, rel, "%v", err)
		return v
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && c.OwnerOK != nil && !c.OwnerOK(st.Uid, st.Gid) {
		c.Add(statetree.FindOwner, rel, "the anchor directory is not owned by your user or its subordinate ids")
	}
	entries, err := statetree.ReadNames(fd)
	if err != nil {
		c.Add(statetree.FindUnreadable, rel, "cannot list: %v", err)
		return v
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e] = true
		switch e {
		case record, upperName, workName:
		case swapName:
			c.Add(statetree.FindPending, path.Join(rel, e), "an interrupted reset: the active upper is complete; `lazaret state reset %s` or the next `lazaret run` finishes it", gp)
		case record + ".tmp":
			c.Add(statetree.FindPending, path.Join(rel, e), "an interrupted record write; the next `lazaret run` rewrites it")
		default:
			c.Add(statetree.FindStructure, path.Join(rel, e), "unexpected entry in the anchor directory")
		}
	}
	if have[record] {
		if r, err := readRecord(fd); err != nil {
			c.Add(statetree.FindRecord, path.Join(rel, record), "%v", err)
		} else if r.GuestPath != gp {
			c.Add(statetree.FindRecord, path.Join(rel, record), "records guest path %q, the directory name says %q", r.GuestPath, gp)
		}
	} else if have[upperName] {
		c.Add(statetree.FindRecord, path.Join(rel, record), "missing; the next `lazaret run` writes it")
	}
	for _, d := range []string{upperName, workName} {
		p := path.Join(rel, d)
		if !have[d] {
			c.Add(statetree.FindStructure, p, "missing; the next `lazaret run` creates it")
			continue
		}
		dfd, err := statetree.OpenDir(fd, d)
		if err != nil {
			c.Add(statetree.FindEscape, p, "%v", err)
			continue
		}
		if d == upperName {
			v.Counts = c.Tree(dfd, p, true)
		} else {
			c.EmptyWork(dfd, p)
		}
		unix.Close(dfd)
	}
	return v
}
