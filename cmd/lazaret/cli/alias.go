package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/shellquote"
)

var aliasCommand = &cli.Command{
	Name:      "alias",
	Usage:     "print shell functions that run an agent CLI in its profile's sandbox",
	ArgsUsage: "[PROFILE[=COMMAND]...]",
	Description: `Each PROFILE becomes a shell function of the same name that runs
"lazaret run --profile PROFILE -- COMMAND ARGS..." in the current directory
(COMMAND defaults to the profile's command, else its name). With no PROFILE,
every profile of your configuration and every built-in profile with a
command (claude, codex) gets one.

Examples:
   eval "$(lazaret alias claude codex)"           # bash or zsh: claude and codex now run sandboxed
   lazaret alias --shell fish claude | source     # fish
   lazaret alias agent=aider                      # function agent runs aider in profile agent
   lazaret alias >> ~/.bashrc                     # every configured profile, permanently`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "shell", Usage: "bash, zsh or fish (default: from $SHELL, else bash)"},
		configFlag,
	},
	Action: func(c *cli.Context) error {
		shell := c.String("shell")
		if shell == "" {
			shell = shellFromEnv(os.Getenv("SHELL"))
		}
		cfg, err := config.Load(c.String("config"), os.Getenv)
		if err != nil {
			return err
		}
		specs := c.Args().Slice()
		if len(specs) == 0 {
			for _, p := range cfg.Profiles() {
				if !p.Builtin || len(p.Command) > 0 {
					specs = append(specs, p.Name)
				}
			}
			if len(specs) == 0 {
				return errdefs.New(errdefs.ErrInvalid, "your configuration defines no profiles to alias: add a [profiles.NAME] table to %s (see README, \"Profile aliases\"), or name a profile: lazaret alias default=bash", configPathOr(cfg.Path))
			}
		}
		var aliases []profileAlias
		for _, s := range specs {
			a, err := parseAliasSpec(s)
			if err != nil {
				return err
			}
			p, err := cfg.Profile(a.Profile)
			if err != nil {
				return err
			}
			if !strings.Contains(s, "=") && len(p.Command) > 0 && aliasCommandPattern.MatchString(p.Command[0]) {
				a.Command = p.Command[0]
			}
			aliases = append(aliases, a)
		}
		run := lazaretInvocation() + " run"
		if p := c.String("config"); p != "" {
			abs, err := filepath.Abs(p)
			if err != nil {
				return err
			}
			run += " --config " + shellquote.Word(abs)
		}
		return writeAliases(c.App.Writer, shell, run, aliases)
	},
}

// profileAlias: the shell function Profile runs Command in the profile.
type profileAlias struct{ Profile, Command string }

var aliasCommandPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._+-]*$|^/[A-Za-z0-9._+/-]+$`)

func parseAliasSpec(s string) (profileAlias, error) {
	prof, cmd, hasCmd := strings.Cut(s, "=")
	if !hasCmd {
		cmd = prof
	}
	if !config.ValidProfileName(prof) {
		return profileAlias{}, errdefs.New(errdefs.ErrInvalid, "%q is not a profile name (1–63 of a-z 0-9 . _ - starting with a letter or digit): use PROFILE or PROFILE=COMMAND", prof)
	}
	if !aliasCommandPattern.MatchString(cmd) {
		return profileAlias{}, errdefs.New(errdefs.ErrInvalid, "command %q in %q is not a plain program name or absolute path: use PROFILE=PROGRAM (arguments go on the function's command line)", cmd, s)
	}
	return profileAlias{Profile: prof, Command: cmd}, nil
}

func shellFromEnv(sh string) string {
	switch filepath.Base(sh) {
	case "zsh":
		return "zsh"
	case "fish":
		return "fish"
	}
	return "bash"
}

func configPathOr(p string) string {
	if p != "" {
		return p
	}
	return "~/.config/lazaret/config.toml"
}

// lazaretInvocation is how the functions call lazaret: `command lazaret`
// when PATH finds this very binary (the front that handed this command line
// to lazaret-cli, or this binary run directly), else its absolute path.
func lazaretInvocation() string {
	exe, err := os.Executable()
	if front != "" {
		exe, err = front, nil
	}
	if err != nil {
		return "command lazaret"
	}
	exe, _ = filepath.EvalSymlinks(exe)
	if p, err := exec.LookPath("lazaret"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil && r == exe {
			return "command lazaret"
		}
	}
	return shellquote.Word(exe)
}

// writeAliases prints one function per alias for shell; run is the
// lazaret run invocation ("command lazaret run [--config F]").
func writeAliases(w io.Writer, shell, run string, as []profileAlias) error {
	switch shell {
	case "bash", "zsh":
		fmt.Fprintf(w, "# Lazaret profile functions (%s): eval \"$(lazaret alias ...)\"\n", shell)
		for _, a := range as {
			fmt.Fprintf(w, "%s() { %s --profile %s -- %s \"$@\"; }\n", a.Profile, run, a.Profile, a.Command)
		}
	case "fish":
		fmt.Fprintln(w, "# Lazaret profile functions (fish): lazaret alias --shell fish ... | source")
		for _, a := range as {
			fmt.Fprintf(w, "function %s --description 'run %s in the Lazaret profile %s'\n    %s --profile %s -- %s $argv\nend\n", a.Profile, a.Command, a.Profile, run, a.Profile, a.Command)
		}
	default:
		return errdefs.New(errdefs.ErrInvalid, "unknown shell %q: use --shell bash, zsh or fish", shell)
	}
	return nil
}
