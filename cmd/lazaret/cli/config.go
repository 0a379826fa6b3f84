package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

var configFlag = &cli.StringFlag{Name: "config", Usage: "configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml)"}

var configCommand = &cli.Command{
	Name:  "config",
	Usage: "show or check the host configuration and its Agent Profiles",
	Description: `The configuration is $XDG_CONFIG_HOME/lazaret/config.toml
(~/.config/lazaret/config.toml) or --config FILE; docs/CONFIG.md lists
every key. Without a file the built-in profiles default and tiny apply.

Examples:
   lazaret config check                  exit 0 when valid, 2 with every problem listed
   lazaret config show --profile claude  the effective profile and its fingerprint
   lazaret config show --json`,
	Subcommands: []*cli.Command{
		{
			Name:      "show",
			Usage:     "print the effective profiles (defaults and built-ins applied) and their fingerprints",
			ArgsUsage: "[PROFILE]",
			Description: `Examples:
   lazaret config show claude          only the claude profile (or --profile claude)
   lazaret config show --json`,
			Flags: []cli.Flag{
				configFlag,
				&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
				&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Usage: "show only this profile"},
			},
			Action: configShow,
		},
		{
			Name:  "check",
			Usage: "validate the configuration: exit 0 when valid, 2 with every problem listed",
			Description: `Examples:
   lazaret config check
   lazaret config check --config ./config.toml --json`,
			Flags: []cli.Flag{
				configFlag,
				&cli.BoolFlag{Name: "json", Usage: "machine-readable output"},
			},
			Action: configCheck,
		},
	},
}

// profileView is the JSON shape of one effective profile.
type profileView struct {
	*config.Profile
	Fingerprint string `json:"fingerprint"`
	// Linger as a duration string ("10m0s"), not nanoseconds.
	Linger string `json:"linger"`
}

type configView struct {
	// File is the configuration file read, "" when only built-ins apply.
	File     string        `json:"file"`
	Profiles []profileView `json:"profiles"`
}

func views(c *config.Config, only string) ([]profileView, error) {
	var out []profileView
	if only != "" {
		p, err := c.Profile(only)
		if err != nil {
			return nil, err
		}
		return []profileView{{p, p.Fingerprint(), p.Linger.String()}}, nil
	}
	for _, p := range c.Profiles() {
		out = append(out, profileView{p, p.Fingerprint(), p.Linger.String()})
	}
	return out, nil
}

func configShow(c *cli.Context) error {
	name := c.String("profile")
	switch args := c.Args(); {
	case args.Len() > 1 && strings.HasPrefix(args.Get(1), "-"):
		return errdefs.New(errdefs.ErrInvalid, "options go before the profile name: `lazaret config show %s %s`", strings.Join(args.Tail(), " "), args.First())
	case args.Len() > 1:
		return errdefs.New(errdefs.ErrInvalid, "lazaret config show takes at most one profile name (got %q)", args.Slice())
	case args.Len() == 1 && name != "" && name != args.First():
		return errdefs.New(errdefs.ErrInvalid, "lazaret config show names two profiles (%q and --profile %q): give one", args.First(), name)
	case args.Len() == 1:
		name = args.First()
	}
	cfg, err := config.Load(c.String("config"), os.Getenv)
	if err != nil {
		return err
	}
	vs, err := views(cfg, name)
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		return writeJSON(w, configView{File: cfg.Path, Profiles: vs})
	}
	if cfg.Path == "" {
		fmt.Fprintln(w, "# no configuration file: built-in profiles only")
	} else {
		fmt.Fprintf(w, "# configuration: %s\n", cfg.Path)
	}
	for _, v := range vs {
		showProfile(w, v)
	}
	return nil
}

func showProfile(w io.Writer, v profileView) {
	p := v.Profile
	fmt.Fprintf(w, "\n[profiles.%s]", p.Name)
	if p.Builtin {
		fmt.Fprint(w, "  # built-in")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "# fingerprint %s\n", v.Fingerprint)
	if p.Description != "" {
		fmt.Fprintf(w, "description = %q\n", p.Description)
	}
	if r := p.Recipe; r != nil {
		fmt.Fprintf(w, "recipe = { base = %q, run = %s }  # %s\n", r.Base, tomlStrings(r.Run), r.Digest)
	} else {
		fmt.Fprintf(w, "image = %q\n", p.Image)
	}
	if len(p.Command) > 0 {
		fmt.Fprintf(w, "command = %s\n", tomlStrings(p.Command))
	}
	fmt.Fprintf(w, "persistent_paths = %s\n", tomlStrings(p.PersistentPaths))
	if len(p.ProfilePaths) > 0 {
		fmt.Fprintf(w, "profile_paths = %s  # shared by every workspace of this profile\n", tomlStrings(p.ProfilePaths))
	}
	fmt.Fprintf(w, "ignored_path_isolation = %v\n", p.IgnoredPathIsolation)
	fmt.Fprintf(w, "share_editor_config = %v\n", p.ShareEditorConfig)
	if u := p.SessionUser(); u.IsRoot() {
		fmt.Fprintf(w, "user = %q\n", u.Name)
	} else {
		fmt.Fprintf(w, "user = %q\nuser_id = %d\n", u.Name, u.UID)
	}
	if p.HostCA {
		fmt.Fprintf(w, "host_ca = true  # the host's CA bundle at %s (the volume below, when the host has one)\n", config.HostCAGuestPath)
	} else {
		fmt.Fprintln(w, "host_ca = false")
	}
	if p.Linger > 0 {
		fmt.Fprintf(w, "linger = %q  # the Domain stays up this long after its last session\n", p.Linger.String())
	} else {
		fmt.Fprintln(w, `linger = "0s"  # the Domain stops with its last session`)
	}
	var rules []string
	for _, r := range p.AutoApprove {
		rule := fmt.Sprintf("{%s = %s", r.Match, tomlStrings(r.Argv))
		if r.Cwd != "" {
			rule += fmt.Sprintf(", cwd = %q", r.Cwd)
		}
		if r.CwdSubtree {
			rule += ", cwd_subtree = true"
		}
		rules = append(rules, rule+"}")
	}
	fmt.Fprintf(w, "auto_approve = [%s]\n", strings.Join(rules, ", "))
	fmt.Fprintf(w, "network.allow = %s\n", tomlStrings(stringsOf(p.Network.Allow)))
	fmt.Fprintf(w, "network.deny = %s  # includes the built-in denies\n", tomlStrings(stringsOf(p.Network.Deny)))
	fmt.Fprintf(w, "network.dns = %s\n", tomlStrings(stringsOf(p.Network.DNS)))
	fmt.Fprintf(w, "network.mode = %q\n", p.Network.Mode)
	fmt.Fprintf(w, "network.allow_hosts = %s\n", tomlStrings(p.Network.AllowHosts))
	if p.Network.Mode == config.ModeAllowlist {
		fmt.Fprintf(w, "network.allow_presets = %s\n", tomlStrings(p.Network.AllowPresets))
		for _, n := range p.Network.AllowPresets {
			fmt.Fprintf(w, "#   preset %s: %s\n", n, strings.Join(netpolicy.Presets[n], ", "))
		}
		fmt.Fprintf(w, "network.ask = %t\n", p.Network.Ask)
	}
	for _, k := range sortedKeys(p.Env) {
		fmt.Fprintf(w, "env.%s = %q\n", k, p.Env[k])
	}
	// Credentials: names and sources only; values are resolved per session
	// and never printed.
	for _, n := range p.EnvPass {
		fmt.Fprintf(w, "env_pass += %q  # value: <secret> (from your environment at each run)\n", n)
	}
	for _, n := range sortedKeys(secretSources(p.Secrets)) {
		fmt.Fprintf(w, "secrets.%s = <secret>  # from %s at each run\n", n, p.Secrets[n])
	}
	fmt.Fprintf(w, "ports = %s\n", tomlStrings(stringsOf(p.Ports)))
	for _, vol := range p.Volumes {
		mode := "rw"
		if vol.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(w, "volumes += { source = %q, target = %q, mode = %q }\n", vol.Source, vol.Target, mode)
	}
}

func secretSources(m map[string]config.Secret) map[string]string {
	out := map[string]string{}
	for n, s := range m {
		out[n] = s.String()
	}
	return out
}

func stringsOf[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// checkResult is the JSON shape of `config check --json`.
type checkResult struct {
	File     string          `json:"file"`
	Valid    bool            `json:"valid"`
	Errors   []*config.Error `json:"errors"`
	Profiles []string        `json:"profiles,omitempty"`
}

func configCheck(c *cli.Context) error {
	cfg, err := config.Load(c.String("config"), os.Getenv)
	res := checkResult{Errors: []*config.Error{}}
	if cfg != nil {
		res.File = cfg.Path
	} else if res.File = c.String("config"); res.File == "" {
		res.File, _ = config.DefaultPath(os.Getenv)
	}
	if err != nil {
		es, ok := config.AsErrors(err)
		if !ok {
			if !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrRefused) {
				return err // not a verdict on the configuration (e.g. I/O)
			}
			es = config.Errors{{Msg: err.Error()}}
		}
		res.Errors = es
		if c.Bool("json") {
			writeJSON(c.App.Writer, res)
		} else {
			for _, e := range es {
				fmt.Fprintln(c.App.ErrWriter, e.Error())
			}
			fmt.Fprintf(c.App.ErrWriter, "lazaret: configuration invalid (%d problem%s)\n", len(es), plural(len(es)))
		}
		return exitError{Code: 2}
	}
	res.Valid = true
	res.Profiles = cfg.Names()
	if c.Bool("json") {
		return writeJSON(c.App.Writer, res)
	}
	where := cfg.Path
	if where == "" {
		where = "no configuration file (built-in profiles)"
	}
	fmt.Fprintf(c.App.Writer, "%s: valid; profiles: %s\n", where, strings.Join(cfg.Names(), ", "))
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
