package config

import (
	"fmt"
	"sort"
	"strings"
)

// Secret says where the value of a credential comes from when a session
// starts (FR-9: credentials are not configuration). Exactly one of Env and
// Command is set. The value itself is never part of the profile, its
// canonical encoding or its fingerprint: the Client CLI resolves it on the
// host, as the developer, before it asks for a Domain, and hands it to
// that session only.
type Secret struct {
	// Env names a variable of the invoking environment holding the value.
	Env string `json:"env,omitempty"`
	// Command is a host program and its arguments (no shell) whose
	// standard output, one trailing newline removed, is the value.
	Command []string `json:"command,omitempty"`
}

// String is the secret's source as `config show` prints it.
func (s Secret) String() string {
	if s.Env != "" {
		return fmt.Sprintf("{ env = %q }", s.Env)
	}
	return fmt.Sprintf("{ command = %s }", quoteList(s.Command))
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// SecretNames returns every variable a session of p receives from its
// Client CLI (env_pass and secrets), sorted.
func (p *Profile) SecretNames() []string {
	names := append([]string{}, p.EnvPass...)
	for n := range p.Secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// secretKeys are the keys of a secrets entry.
var secretKeys = []string{"env", "command"}

// decodeEnvPass decodes env_pass: variable names copied from the invoking
// environment at each session start.
func (d *doc) decodeEnvPass(p pathKey, v any, l *layer, defaults bool) {
	ss, ps := d.strs(p, v)
	seen := map[string]pathKey{}
	for i, s := range ss {
		if msg := checkEnvName(s); msg != "" {
			d.valueErrorf(ps[i], "%s", msg)
			continue
		}
		if prev, dup := seen[s]; dup {
			d.valueErrorf(ps[i], "%s is listed twice (also at %s): remove one", s, d.where(prev))
			continue
		}
		seen[s] = ps[i]
		l.envPass = append(l.envPass, entry[string]{s, ps[i], d.entryWhere(ps[i], defaults)})
	}
}

// decodeSecrets decodes the secrets table: NAME = { env = "X" } or
// NAME = { command = ["pass", "show", "anthropic"] }.
func (d *doc) decodeSecrets(p pathKey, v any, l *layer, defaults bool) {
	t, ok := d.table(p, v)
	if !ok {
		return
	}
	for _, name := range d.keys(p, t) {
		np := p.child(name)
		if msg := checkEnvName(name); msg != "" {
			d.errorf(np, "%s", msg)
			continue
		}
		st, ok := t[name].(map[string]any)
		if !ok {
			d.valueErrorf(np, "a secret is a table: %s = { env = \"VARIABLE\" } or %s = { command = [\"pass\", \"show\", \"name\"] }, not %s", name, name, typeName(t[name]))
			continue
		}
		var s Secret
		good := true
		for _, k := range d.keys(np, st) {
			kp := np.child(k)
			switch k {
			case "env":
				e, ok := d.str(kp, st[k])
				if !ok {
					good = false
					continue
				}
				if !validEnvName(e) {
					d.valueErrorf(kp, "%q is not an environment variable name: use letters, digits and _, not starting with a digit", e)
					good = false
					continue
				}
				s.Env = e
			case "command":
				argv, eps := d.strs(kp, st[k])
				if a, _ := st[k].([]any); len(eps) != len(a) {
					good = false
					continue
				}
				if len(argv) == 0 {
					d.valueErrorf(kp, "the command is empty: give the program and its arguments, e.g. [\"pass\", \"show\", \"anthropic\"]")
					good = false
					continue
				}
				for i, a := range argv {
					if a == "" || strings.ContainsRune(a, 0) {
						d.valueErrorf(eps[i], "empty argument or NUL byte: remove it")
						good = false
					}
				}
				s.Command = argv
			default:
				d.unknown(np, k, secretKeys)
				good = false
			}
		}
		if good && (s.Env == "") == (s.Command == nil) {
			d.errorf(np, "a secret needs exactly one of env = \"VARIABLE\" (read from your environment) and command = [\"program\", …] (its output is the value)")
			good = false
		}
		if good {
			l.secrets[name] = entry[Secret]{s, np, d.entryWhere(np, defaults)}
		}
	}
}

// mergeCredentials merges env_pass (union) and secrets (by name, the
// profile winning) and refuses a name given twice: in env, env_pass or
// secrets it would be unclear which value the session gets.
func (d *doc) mergeCredentials(p *Profile, layers []*layer) {
	pass := map[string]entry[string]{}
	secrets := map[string]entry[Secret]{}
	envAt := map[string]entry[string]{}
	for _, l := range layers {
		if l == nil {
			continue
		}
		for _, e := range l.envPass {
			if _, dup := pass[e.v]; !dup {
				pass[e.v] = e
			}
		}
		for n, e := range l.secrets {
			secrets[n] = e
		}
		for n, e := range l.env {
			envAt[n] = e
		}
	}
	p.EnvPass = []string{}
	p.Secrets = map[string]Secret{}
	for n, e := range pass {
		if s, clash := secrets[n]; clash {
			d.valueErrorf(e.path, "profile %q: %s is both in env_pass (%s) and a secret (%s): keep one", p.Name, n, e.where, s.where)
			continue
		}
		if v, clash := envAt[n]; clash {
			d.valueErrorf(e.path, "profile %q: %s is both in env_pass (%s) and set in env (%s): keep one", p.Name, n, e.where, v.where)
			continue
		}
		p.EnvPass = append(p.EnvPass, n)
	}
	sort.Strings(p.EnvPass)
	for n, e := range secrets {
		if v, clash := envAt[n]; clash {
			d.errorf(e.path, "profile %q: %s is both a secret (%s) and set in env (%s): keep one", p.Name, n, e.where, v.where)
			continue
		}
		p.Secrets[n] = e.v
	}
}
