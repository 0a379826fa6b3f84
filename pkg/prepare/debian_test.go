//go:build lazaret_debian

package prepare

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/imagebuild"
	"golang.org/x/sys/unix"
)

// Built only with -tags lazaret_debian (make test-debian): it needs the
// Debian image (network, 1–3 minutes to build).

// TestPrepareDebian prepares the Debian image. It needs the Debian image
// built (network, ~1 min) and runs only with LAZARET_TEST_DEBIAN=1; set
// LAZARET_TEST_DEBIAN_IMAGE=oci:DIR:TAG to reuse a built layout.
func TestPrepareDebian(t *testing.T) {
	requireRoot(t)
	ref := os.Getenv("LAZARET_TEST_DEBIAN_IMAGE")
	if ref == "" {
		dest := filepath.Join(t.TempDir(), "debian")
		if _, err := imagebuild.Build(context.Background(), imagebuild.Options{Kind: imagebuild.KindDebian, Dest: dest}); err != nil {
			t.Fatal(err)
		}
		ref = "oci:" + dest + ":latest"
	}
	root := t.TempDir()
	start := time.Now()
	a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	out, _ := exec.Command("du", "-sh", a.Rootfs).Output()
	rec := readRecordFile(t, a)
	t.Logf("debian prepare took %s, %s, rootfs_bytes %d, skipped devices %d %v", took, strings.TrimSpace(string(out)),
		rec.RootfsBytes, rec.SkippedDeviceNodes, rec.SkippedDevicePaths)
	r := a.Rootfs
	checkEntry(t, r+"/tmp", unix.S_IFDIR, 0o1777, 0, 0)
	checkEntry(t, r+"/workspace", unix.S_IFDIR, 0o755, 0, 0)
	st := lstat(t, r+"/usr/bin/chage")
	if st.Mode&unix.S_ISGID == 0 || st.Gid != 42 {
		t.Errorf("chage mode %o gid %d, want setgid shadow(42)", st.Mode, st.Gid)
	}
	if _, err := os.Stat(r + "/usr/bin/git"); err != nil {
		t.Error(err)
	}
	start = time.Now()
	if _, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: ref, DomainID: testDomain, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	t.Logf("reuse took %s", time.Since(start))
}
