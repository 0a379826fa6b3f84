package ignoredstate

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/statetree"
)

// Verification is the structural verification report of the Ignored
// Workspace State (`lazaret state ignored verify`, spec §3.8).
type Verification struct {
	Present bool `json:"present"`
	statetree.Counts
	Findings []statetree.Finding `json:"findings"`
}

// Verify checks the state directory with c: a plain directory (not a
// symlink, not another filesystem) whose entries are owned by the developer
// or its subordinate ids and hold no device node, no setuid/setgid file of
// the host user, no hard link to outside and no other filesystem; symlinks
// are data, never followed. A leftover swap directory reports an
// interrupted reset.
//
// Preconditions: the Domain is inactive and its lifecycle lock is held;
// run as namespace root of the Domain's user namespace.
func Verify(domainRoot string, c *statetree.Checker) (Verification, error) {
	v := Verification{Findings: []statetree.Finding{}}
	root, err := openRoot(domainRoot)
	if err != nil {
		return v, err
	}
	defer unix.Close(root)
	saved := c.Findings
	c.Findings = nil
	defer func() { c.Findings = saved }()
	if ok, err := statetree.IsDir(root, swapName); ok {
		c.Add(statetree.FindPending, swapName, "an interrupted `lazaret state ignored reset --all`: the active state is complete; rerun the reset or `lazaret run` to finish it")
	} else if err != nil {
		c.Add(statetree.FindEscape, swapName, "%v", err)
	}
	if _, err := statetree.IsDir(root, trashDir); err != nil {
		c.Add(statetree.FindEscape, trashDir, "%v", err)
	}
	sfd, err := statetree.OpenDir(root, Dir)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		c.Add(statetree.FindEscape, Dir, "%v", err)
	default:
		v.Present = true
		v.Counts = c.Tree(sfd, Dir, false)
		unix.Close(sfd)
	}
	v.Findings = append(v.Findings, c.Findings...)
	return v, nil
}
