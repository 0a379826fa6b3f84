package config

import "path/filepath"

// ProgramNames are the keys of the top-level [programs] table: where
// Lazaret's helper binaries and runsc are (docs/CONFIG.md "programs",
// package locate's search order).
var ProgramNames = []string{"lazaret-hc", "lazaret-rs", "lazaret-gitroute", "lazaret-escalate", "lazaret-init", "runsc"}

// decodePrograms validates [programs]: known names, absolute clean paths.
func (d *doc) decodePrograms(base pathKey, t map[string]any) map[string]string {
	out := map[string]string{}
	for _, k := range d.keys(base, t) {
		p := base.child(k)
		if !contains(ProgramNames, k) {
			d.unknown(base, k, ProgramNames)
			continue
		}
		s, ok := d.str(p, t[k])
		if !ok {
			continue
		}
		if !filepath.IsAbs(s) || filepath.Clean(s) != s {
			d.valueErrorf(p, "%q is not an absolute, clean path: give the full path of the %s binary (e.g. %q)", s, k, "/opt/lazaret/libexec/lazaret/"+k)
			continue
		}
		out[k] = s
	}
	return out
}
