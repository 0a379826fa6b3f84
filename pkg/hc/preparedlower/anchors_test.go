package preparedlower

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
)

// TestVerifyMountNamespace: HC checks the hello's mount namespace through
// RS's pidfd: (dev, ino) and the never-reused ID must both be the
// process's.
func TestVerifyMountNamespace(t *testing.T) {
	broker := proctest.SelfBroker(t)
	rs, err := broker.Start("rs", proc.Command{Path: "/bin/sleep", Args: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Signal(unix.SIGKILL); rs.Wait(context.Background()) })
	dev, ino, id, err := rs.Handle().MountNamespace()
	if err != nil || id == 0 {
		t.Fatalf("RS mount namespace %d:%d ID %d: %v", dev, ino, id, err)
	}
	if err := VerifyMountNamespace(rs.Handle(), &lv1.NamespaceIdentity{Dev: dev, Ino: ino, MntnsId: &id}); err != nil {
		t.Fatal(err)
	}
	other := id + 1<<40
	for name, ns := range map[string]*lv1.NamespaceIdentity{
		"another ID": {Dev: dev, Ino: ino, MntnsId: &other}, "no ID": {Dev: dev, Ino: ino},
		"another inode": {Dev: dev, Ino: ino + 1, MntnsId: &id}, "none": nil,
	} {
		if err := VerifyMountNamespace(rs.Handle(), ns); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("hello mount namespace with %s: %v", name, err)
		}
	}
}

// TestStateAnchors: one bind per persistent path, its source under the
// bundle's anchor directory; a path that cannot be an anchor is refused.
func TestStateAnchors(t *testing.T) {
	bundle := t.TempDir()
	got, err := StateAnchors(bundle, []string{"/root", "/home/dev/.cache"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Target != "/root" || got[1].Target != "/home/dev/.cache" ||
		filepath.Dir(got[0].Source) != ocispec.AnchorSourceDir(bundle) || got[0].Source == got[1].Source {
		t.Fatalf("anchors %+v", got)
	}
	if _, err := StateAnchors(bundle, []string{"relative"}); err == nil {
		t.Fatal("a relative persistent path became an anchor")
	}
}
