package hostcheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// debianDeps is the list scripts/setup.sh installed on Debian 12 before the
// table existed (its PACKAGES array): apt's behaviour there must not change.
var debianDeps = []string{"slirp4netns", "uidmap", "iproute2", "git", "mmdebstrap", "umoci", "busybox-static", "tmux", "fuse3", "util-linux", "ca-certificates"}

func TestPackagesTableParses(t *testing.T) {
	ps := Packages()
	if len(ps) == 0 {
		t.Fatal("no rows")
	}
	for _, p := range ps {
		if p.Dependency == "" || p.Provides == "" || p.Without == "" {
			t.Errorf("%+v: empty column", p)
		}
		// Each manager has a name or an explicit "-" (the parser rejects an
		// empty field); count both.
		for _, m := range Managers {
			if n, ok := p.Names[m]; ok && !packageName().MatchString(n) {
				t.Errorf("%s: %s name %q", p.Dependency, m, n)
			}
		}
		if len(p.Names) == 0 {
			t.Errorf("%s: packaged nowhere", p.Dependency)
		}
	}
	// Every field of every row is present: 8 fields, none empty.
	for i, line := range strings.Split(packagesTSV, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 8 || slices.Contains(f, "") {
			t.Errorf("line %d: %q", i+1, f)
		}
		for _, name := range f[2:6] {
			if name != "-" && !packageName().MatchString(name) {
				t.Errorf("line %d: package %q is neither a name nor -", i+1, name)
			}
		}
	}
}

func TestPackagesDebianList(t *testing.T) {
	got, lacking := PackagesFor(StepDeps, Apt)
	if !slices.Equal(got, debianDeps) || len(lacking) != 0 {
		t.Fatalf("apt deps %q (lacking %v), want exactly %q", got, lacking, debianDeps)
	}
	if got, _ := PackagesFor(StepTLC, Apt); !slices.Equal(got, []string{"default-jre-headless"}) {
		t.Fatalf("apt tlc %q", got)
	}
	if got, _ := PackagesFor(StepProtoc, Apt); !slices.Equal(got, []string{"protobuf-compiler"}) {
		t.Fatalf("apt protoc %q", got)
	}
}

func TestPackagesKnownNames(t *testing.T) {
	for _, c := range []struct {
		dep string
		m   Manager
		pkg string
	}{
		{"newuidmap", Dnf, "shadow-utils"}, {"newuidmap", Pacman, "shadow"}, {"newuidmap", Zypper, "shadow"},
		{"iproute2", Dnf, "iproute"}, {"busybox-static", Dnf, "busybox"}, {"busybox-static", Zypper, "busybox-static"},
		{"mmdebstrap", Dnf, ""}, {"mmdebstrap", Pacman, ""}, {"mmdebstrap", Zypper, ""},
	} {
		p, ok := lookupPackage(c.dep)
		if !ok || p.Names[c.m] != c.pkg {
			t.Errorf("%s on %s: %q, want %q", c.dep, c.m, p.Names[c.m], c.pkg)
		}
	}
	// The dependencies the remedies name are rows of the table.
	for _, dep := range []string{"newuidmap", "slirp4netns", "mmdebstrap"} {
		if _, ok := lookupPackage(dep); !ok {
			t.Errorf("%s is not in packages.tsv", dep)
		}
	}
}

func TestParsePackagesRejects(t *testing.T) {
	for _, tsv := range []string{
		"",
		"a\tb\tc\td\te\tf\tdeps\n",       // 7 fields
		"a\tb\tc\t\te\tf\tdeps\tw\n",     // empty dnf field
		"a\tb\tc\td e\te\tf\tdeps\tw\n",  // two names
		"a\tb\tc\td\te\tf\tinstall\tw\n", // unknown step
		"a\tb\tc\td\te\tf\tdeps\tw\na\tb\tc\td\te\tf\tdeps\tw\n", // duplicate
	} {
		if _, err := ParsePackages(tsv); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("%q: %v, want ErrCorrupt", tsv, err)
		}
	}
}

// osReleases are the fake /etc/os-release files of the distributions the
// remedies know (abridged from the real ones), and one they do not.
var osReleases = map[string]struct {
	contents string
	manager  Manager
	name     string
}{
	"debian":     {"PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n", Apt, "Debian GNU/Linux"},
	"ubuntu":     {"NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\nID_LIKE=debian\n", Apt, "Ubuntu"},
	"fedora":     {"NAME=\"Fedora Linux\"\nVERSION_ID=41\nID=fedora\n", Dnf, "Fedora Linux"},
	"rhel":       {"NAME=\"Red Hat Enterprise Linux\"\nID=\"rhel\"\nID_LIKE=\"fedora\"\n", Dnf, "Red Hat Enterprise Linux"},
	"rocky":      {"NAME=\"Rocky Linux\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n", Dnf, "Rocky Linux"},
	"alma":       {"NAME='AlmaLinux'\nID='almalinux'\nID_LIKE='rhel centos fedora'\n", Dnf, "AlmaLinux"},
	"arch":       {"NAME=\"Arch Linux\"\nID=arch\n", Pacman, "Arch Linux"},
	"manjaro":    {"NAME=\"Manjaro Linux\"\nID=manjaro\nID_LIKE=arch\n", Pacman, "Manjaro Linux"},
	"tumbleweed": {"NAME=\"openSUSE Tumbleweed\"\nID=\"opensuse-tumbleweed\"\nID_LIKE=\"opensuse suse\"\n", Zypper, "openSUSE Tumbleweed"},
	"sles":       {"NAME=\"SLES\"\nID=\"sles\"\nID_LIKE=\"suse\"\n", Zypper, "SLES"},
	"unknown":    {"NAME=\"Gentoo\"\nID=gentoo\n", "", "Gentoo"},
}

func hostWithOSRelease(contents string) Host {
	h := good()
	h.ReadFile = func(p string) ([]byte, error) {
		if p == "/etc/os-release" && contents != "" {
			return []byte(contents), nil
		}
		return nil, os.ErrNotExist
	}
	return h
}

func TestDistroDetection(t *testing.T) {
	for name, c := range osReleases {
		d := hostWithOSRelease(c.contents).Distro()
		if d.Manager != c.manager || d.Name != c.name {
			t.Errorf("%s: %+v, want manager %q name %q", name, d, c.manager, c.name)
		}
	}
	// /usr/lib/os-release is the fallback; no file at all is unknown.
	h := good()
	h.ReadFile = func(p string) ([]byte, error) {
		if p == "/usr/lib/os-release" {
			return []byte("ID=arch\n"), nil
		}
		return nil, os.ErrNotExist
	}
	if d := h.Distro(); d.Manager != Pacman || d.Name != "Arch" {
		t.Errorf("fallback: %+v", d)
	}
	if d := hostWithOSRelease("").Distro(); d.Manager != "" {
		t.Errorf("no os-release: %+v", d)
	}
}

func TestInstallHint(t *testing.T) {
	want := map[string][3]string{ // newuidmap install, newuidmap reinstall, mmdebstrap
		"debian":     {"as root run `apt-get install uidmap`", "as root run `apt-get install --reinstall uidmap`", "as root run `apt-get install mmdebstrap`"},
		"ubuntu":     {"as root run `apt-get install uidmap`", "as root run `apt-get install --reinstall uidmap`", "as root run `apt-get install mmdebstrap`"},
		"fedora":     {"as root run `dnf install shadow-utils`", "as root run `dnf reinstall shadow-utils`", "mmdebstrap is not packaged for Fedora Linux: `lazaret image build debian` will not work; OCI images and the busybox image still do"},
		"rhel":       {"as root run `dnf install shadow-utils`", "as root run `dnf reinstall shadow-utils`", "mmdebstrap is not packaged for Red Hat Enterprise Linux: "},
		"rocky":      {"as root run `dnf install shadow-utils`", "as root run `dnf reinstall shadow-utils`", "mmdebstrap is not packaged for Rocky Linux: "},
		"alma":       {"as root run `dnf install shadow-utils`", "as root run `dnf reinstall shadow-utils`", "mmdebstrap is not packaged for AlmaLinux: "},
		"arch":       {"as root run `pacman -S shadow`", "as root run `pacman -S shadow`", "mmdebstrap is not packaged for Arch Linux: "},
		"manjaro":    {"as root run `pacman -S shadow`", "as root run `pacman -S shadow`", "mmdebstrap is not packaged for Manjaro Linux: "},
		"tumbleweed": {"as root run `zypper install shadow`", "as root run `zypper install --force shadow`", "mmdebstrap is not packaged for openSUSE Tumbleweed: "},
		"sles":       {"as root run `zypper install shadow`", "as root run `zypper install --force shadow`", "mmdebstrap is not packaged for SLES: "},
		"unknown": {
			"as root install the package providing newuidmap (uidmap on Debian/Ubuntu, shadow-utils on Fedora/RHEL, shadow on Arch, shadow on openSUSE)",
			"as root install the package providing newuidmap (uidmap on Debian/Ubuntu",
			"as root install the package providing mmdebstrap (mmdebstrap on Debian/Ubuntu, not packaged on Fedora/RHEL, not packaged on Arch, not packaged on openSUSE)",
		},
	}
	for name, c := range osReleases {
		h := hostWithOSRelease(c.contents)
		w, ok := want[name]
		if !ok {
			t.Fatalf("no expectation for %s", name)
		}
		got := [3]string{h.InstallHint("newuidmap"), h.ReinstallHint("newuidmap"), h.InstallHint("mmdebstrap")}
		for i := range got {
			if !strings.HasPrefix(got[i], w[i]) {
				t.Errorf("%s hint %d: %q, want %q", name, i, got[i], w[i])
			}
		}
		if lacks := h.Distro().Lacks("mmdebstrap"); lacks != (c.manager != Apt && c.manager != "") {
			t.Errorf("%s: Lacks(mmdebstrap) = %v", name, lacks)
		}
	}
	if h := hostWithOSRelease(osReleases["fedora"].contents).InstallHint("slirp4netns"); h != "as root run `dnf install slirp4netns`" {
		t.Errorf("fedora slirp4netns: %q", h)
	}
}

// TestFailuresNameTheDistributionsFix: IDMapTools and Slirp name the
// detected distribution's package.
func TestFailuresNameTheDistributionsFix(t *testing.T) {
	h := hostWithOSRelease(osReleases["fedora"].contents)
	h.LookPath = func(string) (string, error) { return "", errors.New("nope") }
	if _, _, err := h.IDMapTools(); err == nil || !strings.Contains(err.Error(), "newuidmap not found: as root run `dnf install shadow-utils`") {
		t.Errorf("IDMapTools on Fedora: %v", err)
	}
	h = hostWithOSRelease(osReleases["tumbleweed"].contents)
	p := Probes{SlirpVersion: func(string) (string, error) { return "", errors.New("exec format error") }}
	if _, err := h.Slirp(p, "/usr/bin/slirp4netns"); err == nil || !strings.Contains(err.Error(), "`zypper install --force slirp4netns`") {
		t.Errorf("Slirp on openSUSE: %v", err)
	}
}

// TestSetupScriptPackagesMatch runs `scripts/setup.sh packages MANAGER`
// and checks it prints exactly what the Go parser resolves, and says the
// same about what each distribution lacks: one table, two readers, proven
// identical. Then, with a fake os-release and a fake manager on PATH, the
// script's detection picks the manager Distro picks. No root, no network.
func TestSetupScriptPackagesMatch(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash not found (%v): scripts/setup.sh needs it; install bash", err)
	}
	script := filepath.Join("..", "..", "scripts", "setup.sh")
	run := func(env []string, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(bash, append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("setup.sh %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	lines := func(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }
	for _, m := range Managers {
		stdout, stderr := run(nil, "packages", string(m))
		names, lacking := PackagesFor(StepDeps, m)
		if got := lines(stdout); !slices.Equal(got, names) {
			t.Errorf("setup.sh packages %s printed %q, the Go table %q", m, got, names)
		}
		var notes []string
		for _, p := range lacking {
			notes = append(notes, "setup: "+LacksStatement(p, m.Family()))
		}
		if got := lines(stderr); len(notes) > 0 && !slices.Equal(got, notes) || len(notes) == 0 && stderr != "" {
			t.Errorf("setup.sh packages %s said %q, the Go table %q", m, got, notes)
		}
	}

	// Detection: a directory with stub managers first on PATH makes each
	// os-release's manager present, as on that distribution.
	stubs := t.TempDir()
	for _, tool := range []string{"apt-get", "dnf", "pacman", "zypper"} {
		if err := os.WriteFile(filepath.Join(stubs, tool), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]string{}
	for name, c := range osReleases {
		if c.manager != "" { // else the script falls back to a manager on PATH; Distro does not look
			cases[name] = c.contents
		}
	}
	// Each word of the ID mapping alone, so the two mappings cannot drift.
	for _, id := range []string{"debian", "ubuntu", "fedora", "rhel", "centos", "arch", "suse", "sles", "opensuse", "opensuse-leap"} {
		cases["ID="+id] = "ID=" + id + "\n"
	}
	for name, contents := range cases {
		f := filepath.Join(t.TempDir(), "os-release")
		if err := os.WriteFile(f, []byte(contents), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr := run([]string{"LAZARET_OS_RELEASE=" + f, "PATH=" + stubs + ":" + os.Getenv("PATH")}, "packages")
		d := hostWithOSRelease(contents).Distro()
		names, lacking := PackagesFor(StepDeps, d.Manager)
		if got := lines(stdout); d.Manager == "" || !slices.Equal(got, names) {
			t.Errorf("%s: setup.sh detected packages %q, Distro (%q) %q", name, got, d.Manager, names)
		}
		var notes []string
		for _, p := range lacking {
			notes = append(notes, "setup: "+LacksStatement(p, d.Name))
		}
		if got := strings.Join(notes, "\n") + "\n"; len(notes) > 0 && stderr != got || len(notes) == 0 && stderr != "" {
			t.Errorf("%s: setup.sh said %q, want %q", name, stderr, got)
		}
	}
}
