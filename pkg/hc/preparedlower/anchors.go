package preparedlower

import (
	"fmt"
	"path/filepath"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// StateAnchors are the profile's persistent paths as State Anchor binds
// (spec §3.5) of the bundle in bundleDir: RS mounts each overlay at the
// source in its own namespace.
func StateAnchors(bundleDir string, persistentPaths []string) ([]ocispec.Anchor, error) {
	dir := ocispec.AnchorSourceDir(bundleDir)
	var out []ocispec.Anchor
	for _, p := range persistentPaths {
		name, err := anchor.Name(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ocispec.Anchor{Source: filepath.Join(dir, name), Target: p})
	}
	return out, nil
}

func sameNamespace(a, b *lv1.NamespaceIdentity) bool {
	return a.GetDev() == b.GetDev() && a.GetIno() == b.GetIno() && a.GetMntnsId() == b.GetMntnsId()
}

// VerifyMountNamespace checks the mount namespace RS reports in its hello
// against the one its exact pidfd shows (PIDFD_GET_MNT_NAMESPACE): nsfs
// (dev, ino) and the never-reused ID the holder scan of mountsAbsent will
// compare. A kernel without NS_GET_MNTNS_ID reports no ID on either side.
func VerifyMountNamespace(h *pidfs.Handle, reported *lv1.NamespaceIdentity) error {
	dev, ino, id, err := h.MountNamespace()
	if err != nil {
		return fmt.Errorf("read runtime supervisor mount namespace through its pidfd: %w", err)
	}
	if got := (&lv1.NamespaceIdentity{Dev: dev, Ino: ino, MntnsId: &id}); reported.GetDev() == 0 || !sameNamespace(reported, got) {
		return errdefs.New(errdefs.ErrRefused, "runtime supervisor reports mount namespace %d:%d (ID %d) but its pidfd shows %d:%d (ID %d)",
			reported.GetDev(), reported.GetIno(), reported.GetMntnsId(), dev, ino, id)
	}
	return nil
}
