package rs

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/mountns"
	"github.com/lazaret/lazaret/pkg/mountskel"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/prepared"
)

// skeletonDir is the generation's mount-point skeleton (package mountskel).
func (s *supervisor) skeletonDir() string { return filepath.Join(s.start.BundleDir, "skeleton") }

// mountRoot exposes the prepared lower read-only at rootfs. When a bind of
// the spec needs a mount point the image lacks (a volume or a linked
// worktree's common Git directory at an arbitrary absolute path), the root
// is instead a read-only overlay of the generation's skeleton over the
// lower: the shared prepared lower and the persistent State Anchor uppers
// are never written.
func (s *supervisor) mountRoot(art prepared.Artifact, rootfs string) error {
	pts, err := mountskel.Needed(s.spec, art.Rootfs, ocispec.AnchorSourceDir(s.start.BundleDir))
	if err != nil {
		return err
	}
	s.removeSkeleton()
	if len(pts) == 0 {
		if err := mountns.BindReadOnly(art.Rootfs, rootfs); err != nil {
			return fmt.Errorf("expose prepared lower %s: %w", art.ID, err)
		}
		return nil
	}
	skel := s.skeletonDir()
	if err := mountskel.Build(skel, art.Rootfs, pts); err != nil {
		return fmt.Errorf("build the mount-point skeleton: %w", err)
	}
	if err := mountskel.MountRoot(art.Rootfs, skel, rootfs); err != nil {
		return fmt.Errorf("expose prepared lower %s under the mount-point skeleton: %w", art.ID, err)
	}
	s.log.Info("mount points provided by the generation's skeleton", "count", len(pts))
	return nil
}

// removeSkeleton deletes the generation's skeleton (after the root is
// unmounted; a leftover of a crashed generation before the next build).
func (s *supervisor) removeSkeleton() {
	if err := os.RemoveAll(s.skeletonDir()); err != nil {
		s.log.Warn("remove mount-point skeleton", "err", err)
	}
}
