package hostcheck

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// packagesTSV is the one table of host packages: scripts/setup.sh installs
// from it and the remedies below name its packages, so the two cannot
// disagree about a distribution (TestSetupScriptPackagesMatch runs the
// script against this parser). Its header documents the columns.
//
//go:embed packages.tsv
var packagesTSV string

// Manager is a distribution family's package manager.
type Manager string

// The package managers setup and the remedies know, in the table's column
// order. The zero Manager is an unknown distribution.
const (
	Apt    Manager = "apt"    // Debian, Ubuntu and derivatives
	Dnf    Manager = "dnf"    // Fedora, RHEL, Rocky, Alma, CentOS
	Pacman Manager = "pacman" // Arch and derivatives
	Zypper Manager = "zypper" // openSUSE, SLES
)

// Managers lists the known managers in the table's column order.
var Managers = []Manager{Apt, Dnf, Pacman, Zypper}

// Family names the distributions a manager serves, for messages about a
// manager rather than a detected distribution.
func (m Manager) Family() string {
	switch m {
	case Apt:
		return "Debian/Ubuntu"
	case Dnf:
		return "Fedora/RHEL"
	case Pacman:
		return "Arch"
	case Zypper:
		return "openSUSE"
	}
	return "an unknown distribution"
}

// Package is one row of the table: a host dependency and the package that
// provides it under each manager.
type Package struct {
	Dependency string // the name InstallHint takes
	Provides   string // the command or file that is used
	// Names maps each manager to its package; "" where the distribution
	// does not package the dependency ("-" in the table).
	Names map[Manager]string
	Step  string // the scripts/setup.sh subcommand that installs it
	// Without says what does not work when the dependency is missing.
	Without string
}

// Steps of scripts/setup.sh that install packages from the table.
const (
	StepDeps   = "deps"
	StepProtoc = "protoc"
	StepTLC    = "tlc"
	// StepBenchDeps installs what `make bench` compares Lazaret with
	// (srt's own dependencies).
	StepBenchDeps = "bench-deps"
)

var packageName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9+._-]*$`) })

// ParsePackages parses the table: tab-separated rows of dependency,
// provides, the apt, dnf, pacman and zypper names (or "-"), step and
// what fails without it; blank lines and lines starting with # are
// comments.
func ParsePackages(tsv string) ([]Package, error) {
	var out []Package
	seen := map[string]bool{}
	for i, line := range strings.Split(tsv, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return errdefs.New(errdefs.ErrCorrupt, "packages.tsv line %d: %s", i+1, fmt.Sprintf(format, args...))
		}
		f := strings.Split(line, "\t")
		if len(f) != 8 {
			return nil, bad("%d tab-separated fields, want 8 (dependency, provides, apt, dnf, pacman, zypper, step, without it)", len(f))
		}
		for j, v := range f {
			if strings.TrimSpace(v) != v || v == "" {
				return nil, bad("field %d is empty or has surrounding spaces (write - where a distribution lacks the package)", j+1)
			}
		}
		p := Package{Dependency: f[0], Provides: f[1], Names: map[Manager]string{}, Step: f[6], Without: f[7]}
		if seen[p.Dependency] {
			return nil, bad("dependency %q is listed twice", p.Dependency)
		}
		seen[p.Dependency] = true
		if p.Step != StepDeps && p.Step != StepProtoc && p.Step != StepTLC && p.Step != StepBenchDeps {
			return nil, bad("step %q is not %s, %s, %s or %s", p.Step, StepDeps, StepProtoc, StepTLC, StepBenchDeps)
		}
		for j, m := range Managers {
			name := f[2+j]
			if name == "-" {
				continue
			}
			if !packageName().MatchString(name) {
				return nil, bad("%s package name %q is not one package name", m, name)
			}
			p.Names[m] = name
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errdefs.New(errdefs.ErrCorrupt, "packages.tsv has no rows")
	}
	return out, nil
}

// packages is the embedded table, parsed once when first needed (not at
// start-up: every lazaret process imports this package); a malformed table
// is a build defect that every test of this package reports.
var packages = sync.OnceValue(func() []Package {
	ps, err := ParsePackages(packagesTSV)
	if err != nil {
		panic(err)
	}
	return ps
})

// Packages returns the embedded table's rows in order.
func Packages() []Package { return slices.Clone(packages()) }

func lookupPackage(dep string) (Package, bool) {
	for _, p := range packages() {
		if p.Dependency == dep {
			return p, true
		}
	}
	return Package{}, false
}

// PackagesFor resolves a setup step for manager m: the package names to
// install, in table order, and the rows the distribution does not package.
// It is what `scripts/setup.sh packages M` prints.
func PackagesFor(step string, m Manager) (names []string, lacking []Package) {
	for _, p := range packages() {
		if p.Step != step {
			continue
		}
		if n := p.Names[m]; n != "" {
			names = append(names, n)
		} else {
			lacking = append(lacking, p)
		}
	}
	return names, lacking
}

// Distro is the distribution the remedies are written for.
type Distro struct {
	ID   string // os-release ID, "" when none could be read
	Name string // os-release NAME, else the manager's family
	// Manager is the first of ID and ID_LIKE that names a known family;
	// zero when none does.
	Manager Manager
}

// osReleasePaths are read in order (os-release(5)); through Host.ReadFile.
var osReleasePaths = []string{"/etc/os-release", "/usr/lib/os-release"}

// Distro detects the distribution from os-release's ID and ID_LIKE, the
// same mapping scripts/setup.sh uses (which then also checks that the
// manager is on PATH).
func (h Host) Distro() Distro {
	if h.ReadFile == nil {
		return Distro{Name: Manager("").Family()}
	}
	for _, p := range osReleasePaths {
		if b, err := h.ReadFile(p); err == nil {
			return DistroFromOSRelease(string(b))
		}
	}
	return Distro{Name: Manager("").Family()}
}

// DistroFromOSRelease reads an os-release file's contents.
func DistroFromOSRelease(s string) Distro {
	kv := parseOSRelease(s)
	d := Distro{ID: kv["ID"], Name: kv["NAME"]}
	for _, id := range append([]string{kv["ID"]}, strings.Fields(kv["ID_LIKE"])...) {
		if m := managerForID(id); m != "" {
			d.Manager = m
			break
		}
	}
	if d.Name == "" {
		d.Name = d.Manager.Family()
	}
	return d
}

// managerForID maps one os-release ID or ID_LIKE word to its family's
// manager (scripts/setup.sh manager_for_id is the same table).
func managerForID(id string) Manager {
	switch {
	case id == "debian" || id == "ubuntu":
		return Apt
	case id == "fedora" || id == "rhel" || id == "centos":
		return Dnf
	case id == "arch":
		return Pacman
	case id == "suse" || id == "sles" || id == "opensuse" || strings.HasPrefix(id, "opensuse-"):
		return Zypper
	}
	return ""
}

// parseOSRelease reads KEY=VALUE lines, unquoting shell-style single or
// double quotes (os-release(5)).
func parseOSRelease(s string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if n := len(v); n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n-1] == v[0] {
			q := v[0]
			v = v[1 : n-1]
			if q == '"' {
				v = strings.NewReplacer(`\"`, `"`, `\\`, `\`, `\$`, `$`, "\\`", "`").Replace(v)
			}
		}
		kv[k] = v
	}
	return kv
}

// InstallHint is the remedy for a missing dependency (a row of the table)
// on the detected distribution, e.g. "as root run `dnf install
// shadow-utils`", or a statement that the distribution does not package it
// and what will not work.
func (h Host) InstallHint(dep string) string { return h.Distro().InstallHint(dep) }

// ReinstallHint is the remedy for a broken installation of dep (a program
// that lost its setuid bit, or fails to run).
func (h Host) ReinstallHint(dep string) string { return h.Distro().ReinstallHint(dep) }

// InstallHint: see Host.InstallHint.
func (d Distro) InstallHint(dep string) string { return d.hint(dep, false) }

// ReinstallHint: see Host.ReinstallHint.
func (d Distro) ReinstallHint(dep string) string { return d.hint(dep, true) }

// Lacks reports that the detected distribution is known and does not
// package dep.
func (d Distro) Lacks(dep string) bool {
	p, ok := lookupPackage(dep)
	return ok && d.Manager != "" && p.Names[d.Manager] == ""
}

func (d Distro) hint(dep string, reinstall bool) string {
	p, ok := lookupPackage(dep)
	if !ok {
		return fmt.Sprintf("install %s as root with your distribution's package manager", dep)
	}
	if d.Manager == "" {
		var names []string
		for _, m := range Managers {
			if n := p.Names[m]; n != "" {
				names = append(names, n+" on "+m.Family())
			} else {
				names = append(names, "not packaged on "+m.Family())
			}
		}
		return fmt.Sprintf("as root install the package providing %s (%s)", p.Provides, strings.Join(names, ", "))
	}
	name := p.Names[d.Manager]
	if name == "" {
		return LacksStatement(p, d.Name)
	}
	return "as root run `" + installCommand(d.Manager, name, reinstall) + "`"
}

// LacksStatement says that distro does not package p and what will not
// work; scripts/setup.sh prints the same sentence.
func LacksStatement(p Package, distro string) string {
	return fmt.Sprintf("%s is not packaged for %s: %s", p.Dependency, distro, p.Without)
}

func installCommand(m Manager, name string, reinstall bool) string {
	switch m {
	case Apt:
		if reinstall {
			return "apt-get install --reinstall " + name
		}
		return "apt-get install " + name
	case Dnf:
		if reinstall {
			return "dnf reinstall " + name
		}
		return "dnf install " + name
	case Pacman:
		return "pacman -S " + name // reinstalls an installed package too
	case Zypper:
		if reinstall {
			return "zypper install --force " + name
		}
		return "zypper install " + name
	}
	return "install " + name
}
