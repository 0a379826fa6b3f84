package hostcheck

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Probes are the observations `lazaret doctor` needs beyond reading files:
// each needs a process, a filesystem query or a scan of the Domains, and
// each is injected so tests present any host without changing the machine.
// A nil probe reports the check as not run (an error naming the probe).
type Probes struct {
	// Pidfs runs the spec's finite pidfs host support probe (§3.2).
	Pidfs func() error
	// UserNS creates (and discards) an unprivileged user namespace.
	UserNS func() error
	// RunscVersion is the gVisor module version of the runsc at path: the
	// Go main-module version its build information records, or, for a build
	// from a copy of the module (scripts/setup.sh precompiles its seccomp
	// programs there, and such a build records none), the version `runsc
	// --version` reports.
	RunscVersion func(path string) (string, error)
	// SlirpVersion is the version slirp4netns at path reports.
	SlirpVersion func(path string) (string, error)
	// Statfs describes the filesystem holding path (or its nearest existing
	// ancestor).
	Statfs func(path string) (FS, error)
	// Domains lists the developer's Domains with their liveness evidence.
	Domains func() ([]DomainState, error)
}

// FS is a filesystem's type and free space.
type FS struct {
	Type      int64  // statfs f_type
	FreeBytes uint64 // available to an unprivileged user
}

// DomainState is one Domain as doctor sees it.
type DomainState struct {
	ID, Profile, Workspace string
	// LockHeld: a Host Coordinator holds the Domain lifecycle lock.
	LockHeld bool
	// RuntimeLeft: the Domain's runtime directory still exists.
	RuntimeLeft bool
}

// NeedsRecovery reports a Domain a dead Host Coordinator left behind: no
// coordinator holds the lifecycle lock, yet the runtime directory remains.
// Its next `lazaret run` recovers it (spec FR-7).
func (d DomainState) NeedsRecovery() bool { return !d.LockHeld && d.RuntimeLeft }

func missingProbe(name string) error {
	return errdefs.New(errdefs.ErrUnsupportedHost, "the %s probe was not run (internal error): report this as a Lazaret bug", name)
}

// Sysctl paths the user-namespace check reads (through Host.ReadFile).
const (
	sysctlMaxUserNS      = "/proc/sys/user/max_user_namespaces"
	sysctlUsernsClone    = "/proc/sys/kernel/unprivileged_userns_clone"
	sysctlAppArmorUserns = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
)

func (h Host) sysctl(path string) (string, bool) {
	b, err := h.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// UserNamespaces checks that unprivileged user namespaces are allowed:
// user.max_user_namespaces, Debian's kernel.unprivileged_userns_clone,
// and Ubuntu 24.04's kernel.apparmor_restrict_unprivileged_userns (a profile
// granting `userns` to programs satisfies it, so the probe decides and the
// sysctl only chooses the remedy).
func (h Host) UserNamespaces(p Probes, programs []string) error {
	if v, ok := h.sysctl(sysctlMaxUserNS); ok && v == "0" {
		return errdefs.New(errdefs.ErrUnsupportedHost, "user namespaces are disabled (user.max_user_namespaces = 0): as root run `sysctl -w user.max_user_namespaces=28633` and add `user.max_user_namespaces = 28633` to /etc/sysctl.d/90-lazaret.conf")
	}
	if v, ok := h.sysctl(sysctlUsernsClone); ok && v == "0" {
		return errdefs.New(errdefs.ErrUnsupportedHost, "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0): as root run `sysctl -w kernel.unprivileged_userns_clone=1` and add `kernel.unprivileged_userns_clone = 1` to /etc/sysctl.d/90-lazaret.conf")
	}
	if p.UserNS == nil {
		return missingProbe("user namespace")
	}
	err := p.UserNS()
	if err == nil {
		return nil // also when AppArmor restricts user namespaces but a profile grants them
	}
	if v, ok := h.sysctl(sysctlAppArmorUserns); ok && v == "1" {
		return errdefs.New(errdefs.ErrUnsupportedHost, "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1, the Ubuntu 24.04 default; probe: %v): as root write this profile to /etc/apparmor.d/lazaret and run `apparmor_parser -r /etc/apparmor.d/lazaret`:\n%s\n(or, machine-wide and less strict: `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`)", err, AppArmorProfile(programs))
	}
	return errdefs.New(errdefs.ErrUnsupportedHost, "cannot create an unprivileged user namespace (%v): check `sysctl user.max_user_namespaces kernel.unprivileged_userns_clone kernel.apparmor_restrict_unprivileged_userns` and any LSM or container policy that forbids it", err)
}

// AppArmorProfile is an AppArmor profile allowing each program to create
// user namespaces (the form Ubuntu ships for programs that need them).
func AppArmorProfile(programs []string) string {
	var b strings.Builder
	b.WriteString("abi <abi/4.0>,\ninclude <tunables/global>\n")
	for _, p := range programs {
		name := strings.NewReplacer("/", "_", ".", "_").Replace(strings.TrimPrefix(p, "/"))
		fmt.Fprintf(&b, "profile lazaret_%s %s flags=(unconfined) {\n  userns,\n}\n", name, p)
	}
	return strings.TrimRight(b.String(), "\n")
}

// ProbeVersionNote is doctor's detail for a passed pidfs probe.
const ProbeVersionNote = "pidfd operations, pidfs identity and non-reuse observed"

// PidfsProbe runs the pidfs host support probe.
func (h Host) PidfsProbe(p Probes) error {
	if p.Pidfs == nil {
		return missingProbe("pidfs host support")
	}
	if err := p.Pidfs(); err != nil {
		return errdefs.Mark(fmt.Errorf("%w (run `lazaret kernel qualify` to see every step of the qualification suite; Lazaret needs a qualified Linux ≥ 6.9 x86-64 kernel)", err), errdefs.ErrUnsupportedHost)
	}
	return nil
}

// Runsc checks that the runsc at path is the pinned gVisor version.
func (h Host) Runsc(p Probes, path, pinned string) (string, error) {
	if p.RunscVersion == nil {
		return "", missingProbe("runsc version")
	}
	v, err := p.RunscVersion(path)
	if err != nil {
		return "", errdefs.New(errdefs.ErrUnsupportedHost, "cannot read the version of %s (%v): run `make setup` in the Lazaret checkout to build the pinned runsc %s, or set LAZARET_RUNSC to it", path, err, pinned)
	}
	if v != pinned {
		return v, errdefs.New(errdefs.ErrUnsupportedHost, "%s is gVisor %s, not the pinned %s: run `make setup` in the Lazaret checkout to build the pinned runsc, or set LAZARET_RUNSC to it", path, v, pinned)
	}
	return v, nil
}

// MinSlirp is the oldest slirp4netns with every flag Lazaret passes
// (--enable-seccomp, --exit-fd, --ready-fd, --disable-host-loopback);
// docs/SUPPORT.md names the tested version.
var MinSlirp = [3]int{1, 0, 0}

// Slirp checks slirp4netns's version.
func (h Host) Slirp(p Probes, path string) (string, error) {
	if p.SlirpVersion == nil {
		return "", missingProbe("slirp4netns version")
	}
	v, err := p.SlirpVersion(path)
	if err != nil {
		return "", errdefs.New(errdefs.ErrUnsupportedHost, "%s --version failed (%v): %s", path, err, h.ReinstallHint("slirp4netns"))
	}
	got, ok := parseVersion3(v)
	if !ok || less3(got, MinSlirp) {
		return v, errdefs.New(errdefs.ErrUnsupportedHost, "slirp4netns %q is older than %d.%d.%d (or unreadable): install slirp4netns %d.%d.%d or later: %s (Debian 12, Ubuntu 22.04 and current Fedora, Arch and openSUSE ship one)", v, MinSlirp[0], MinSlirp[1], MinSlirp[2], MinSlirp[0], MinSlirp[1], MinSlirp[2], h.InstallHint("slirp4netns"))
	}
	return v, nil
}

func parseVersion3(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".", 3)
	if len(parts) < 2 {
		return v, false
	}
	for i, p := range parts {
		if j := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			p = p[:j]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func less3(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// Filesystem types (statfs f_type) doctor names.
const (
	fsNFS      = 0x6969
	fsSMB2     = 0xfe534d42
	fsCIFS     = 0xff534d42
	fsFUSE     = 0x65735546
	fsOverlay  = 0x794c7630
	fsEcryptfs = 0xf15f
	fs9P       = 0x01021997
)

var unsuitableFS = map[int64]string{
	fsNFS: "NFS", fsSMB2: "SMB", fsCIFS: "CIFS", fsFUSE: "FUSE", fsOverlay: "overlayfs", fsEcryptfs: "eCryptfs", fs9P: "9p",
}

// MinStorageFree and MinRuntimeFree are the free space doctor requires.
const (
	MinStorageFree = 2 << 30  // an image, a prepared lower and State Anchors
	MinRuntimeFree = 16 << 20 // sockets, bundle, resolver files
)

// Dir checks that the Storage Root or runtime root (role) lies on a local
// filesystem that can hold an overlay upper layer, with at least minFree
// bytes available.
func (h Host) Dir(p Probes, role, path string, minFree uint64, envVar string) error {
	if p.Statfs == nil {
		return missingProbe("filesystem")
	}
	fs, err := p.Statfs(path)
	if err != nil {
		return errdefs.New(errdefs.ErrUnsupportedHost, "cannot inspect the filesystem of the %s %s (%v): set %s to a directory on a local filesystem you own", role, path, err, envVar)
	}
	if name, bad := unsuitableFS[fs.Type]; bad {
		return errdefs.New(errdefs.ErrUnsupportedHost, "the %s %s is on %s, which cannot hold Lazaret's overlay layers, locks and sockets reliably: set %s to a directory on a local ext4, xfs, btrfs or tmpfs filesystem (docs/SUPPORT.md)", role, path, name, envVar)
	}
	if fs.FreeBytes < minFree {
		return errdefs.New(errdefs.ErrUnsupportedHost, "the %s %s has %d MiB free, under the %d MiB Lazaret needs: free space there or set %s to a roomier local filesystem", role, path, fs.FreeBytes>>20, minFree>>20, envVar)
	}
	return nil
}

// FSTypeName names a statfs f_type for doctor's report.
func FSTypeName(t int64) string {
	switch t {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	}
	if n, ok := unsuitableFS[t]; ok {
		return n
	}
	return fmt.Sprintf("f_type %#x", t)
}

// StaleDomains lists Domains a dead Host Coordinator left behind: no
// coordinator holds the lifecycle lock, yet the runtime directory remains.
// The next `lazaret run` of that Domain recovers it (spec FR-7).
func (h Host) StaleDomains(p Probes) (int, error) {
	if p.Domains == nil {
		return 0, missingProbe("Domain scan")
	}
	ds, err := p.Domains()
	if err != nil {
		return 0, errdefs.Mark(fmt.Errorf("scan Domains: %w", err), errdefs.ErrUnsupportedHost)
	}
	var stale []string
	for _, d := range ds {
		if d.NeedsRecovery() {
			stale = append(stale, fmt.Sprintf("%s (profile %s, workspace %s): run `lazaret run -C %s --profile %s -- true` to recover it", d.ID, d.Profile, d.Workspace, d.Workspace, d.Profile))
		}
	}
	if len(stale) > 0 {
		return len(ds), errdefs.New(errdefs.ErrUnsupportedHost, "%d Domain(s) need recovery after a crash: %s", len(stale), strings.Join(stale, "; "))
	}
	return len(ds), nil
}
