package check

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// TLASync compares a Go transcription with its TLA+ module and .cfg so the
// two stay side by side: every Go action is defined in the module, every
// action of the module's Next disjunction groups is transcribed, the .cfg's
// INVARIANTS and PROPERTIES are exactly the transcribed invariants and
// properties (property instances are named Name[...]), and every action has
// a row in the mapping file. It returns the differences found.
func TLASync[S any](sp *Spec[S], actions []string, tlaPath, cfgPath, mappingPath string) ([]string, error) {
	tla, err := os.ReadFile(tlaPath)
	if err != nil {
		return nil, err
	}
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	mapping, err := os.ReadFile(mappingPath)
	if err != nil {
		return nil, err
	}
	var diffs []string
	defs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Za-z0-9]*)(\([^)]*\))? ==`).FindAllStringSubmatch(string(tla), -1) {
		defs[m[1]] = true
	}
	for _, a := range actions {
		if !defs[a] {
			diffs = append(diffs, fmt.Sprintf("action %s is not defined in %s", a, tlaPath))
		}
		if !regexp.MustCompile(`\|\s*` + a + `\s*\|`).Match(mapping) {
			diffs = append(diffs, fmt.Sprintf("action %s has no row in %s", a, mappingPath))
		}
	}
	// Actions referenced as disjuncts "\/ Name(" in the module must be transcribed.
	have := map[string]bool{}
	for _, a := range actions {
		have[a] = true
	}
	for _, m := range regexp.MustCompile(`\\/ \(?(?:\\E [a-z]+ \\in [A-Za-z]+ : )?([A-Z][A-Za-z0-9]*)\(`).FindAllStringSubmatch(string(tla), -1) {
		name := m[1]
		if strings.HasSuffix(name, "Progress") || strings.HasSuffix(name, "Interleaving") || name == "Environment" {
			continue
		}
		if defs[name] && !have[name] && isAction(string(tla), name) {
			diffs = append(diffs, fmt.Sprintf("module action %s is not transcribed", name))
		}
	}
	section := func(name string) []string {
		out := CfgSection(cfg, name)
		sort.Strings(out)
		return out
	}
	var invs []string
	for _, inv := range sp.Invariants {
		invs = append(invs, inv.Name)
	}
	sort.Strings(invs)
	if a, b := strings.Join(section("INVARIANTS"), " "), strings.Join(invs, " "); a != b {
		diffs = append(diffs, fmt.Sprintf("cfg INVARIANTS %q != transcribed %q", a, b))
	}
	propSet := map[string]bool{}
	for _, p := range sp.Properties {
		name, _, _ := strings.Cut(p.Name, "[")
		propSet[name] = true
	}
	var props []string
	for p := range propSet {
		props = append(props, p)
	}
	sort.Strings(props)
	if a, b := strings.Join(section("PROPERTIES"), " "), strings.Join(props, " "); a != b {
		diffs = append(diffs, fmt.Sprintf("cfg PROPERTIES %q != transcribed %q", a, b))
	}
	for _, p := range props {
		if !defs[p] {
			diffs = append(diffs, fmt.Sprintf("property %s is not defined in %s", p, tlaPath))
		}
	}
	return diffs, nil
}

// isAction reports whether the module's definition of name assigns a primed
// variable or says UNCHANGED (i.e. it is an action, not a predicate).
func isAction(tla, name string) bool {
	re := regexp.MustCompile(`(?ms)^` + name + `(\([^)]*\))? ==(.*?)\n\n`)
	m := re.FindStringSubmatch(tla)
	return m != nil && (strings.Contains(m[2], "' ") || strings.Contains(m[2], "UNCHANGED"))
}

// TLADisjuncts returns the names of the operators applied in the disjunction
// list of a module definition (e.g. the actions of a fairness group such as
// DomainServiceProgress(d)), in order.
func TLADisjuncts(tlaPath, def string) ([]string, error) {
	tla, err := os.ReadFile(tlaPath)
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`(?ms)^` + def + `(\([^)]*\))? ==(.*?)\n\n`).FindStringSubmatch(string(tla))
	if m == nil {
		return nil, fmt.Errorf("%s: no definition of %s", tlaPath, def)
	}
	var out []string
	for _, d := range regexp.MustCompile(`\\/ \(?(?:\\E [a-z]+ \\in [A-Za-z]+ : )?([A-Z][A-Za-z0-9]*)\(`).FindAllStringSubmatch(m[2], -1) {
		out = append(out, d[1])
	}
	return out, nil
}

// CfgSection returns the names listed under a section keyword of a TLC
// configuration (e.g. INVARIANTS or PROPERTIES), in file order.
func CfgSection(cfg []byte, name string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(string(cfg), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, `\*`) {
			continue
		}
		if t == name {
			in = true
			continue
		}
		if in && strings.ToUpper(t) == t && !strings.Contains(t, " ") {
			break // next section keyword
		}
		if in {
			if strings.Contains(t, " ") {
				break
			}
			out = append(out, t)
		}
	}
	return out
}
