package hc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
)

// hostSupport refuses an unqualified kernel and runs the per-boot
// PidfsHostSupportProbe before the first generation of this boot, caching
// success only under the current boot ID (spec §3.2).
func (c *coordinator) hostSupport() error {
	host := hostcheck.Real(nil)
	for _, m := range c.cfg.profile.Mounts(c.cfg.workspace) {
		if !m.ReadOnly {
			host.SandboxWritable = append(host.SandboxWritable, m.Source)
		}
	}
	if err := host.Kernel(); err != nil {
		return err
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrUnsupportedHost)
	}
	dir := filepath.Join(c.paths.StorageRoot, "host")
	cache := filepath.Join(dir, "pidfs-probe."+boot.String())
	if b, err := os.ReadFile(cache); err == nil && strings.TrimSpace(string(b)) == proc.ProbeVersion {
		return nil
	}
	start := time.Now()
	rep, err := c.broker.PidfsHostSupportProbe(context.Background())
	if err != nil {
		return err
	}
	c.log.Info("pidfs host support probe passed", "boot_id", boot.String(), "duration", time.Since(start), "observations", len(rep.Observations))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Entries of earlier boots are stale: only the current boot's counts.
	if old, _ := filepath.Glob(filepath.Join(dir, "pidfs-probe.*")); len(old) > 0 {
		for _, o := range old {
			os.Remove(o)
		}
	}
	return os.WriteFile(cache, []byte(proc.ProbeVersion+"\n"), 0o600)
}
