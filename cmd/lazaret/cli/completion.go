package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Completion works through urfave/cli's hidden --generate-bash-completion
// flag (the App sets EnableBashCompletion): the bash and zsh scripts ask
// lazaret itself for the candidates; fish's is generated from the command
// tree (App.ToFishCompletion).
var completionCommand = &cli.Command{
	Name:      "completion",
	Usage:     "print the shell completion script for bash, zsh or fish",
	ArgsUsage: "bash|zsh|fish",
	Description: `make install puts these where each shell finds them; to use one by hand:

Examples:
   source <(lazaret completion bash)                              # bash, this shell
   lazaret completion zsh > "${fpath[1]}/_lazaret"                # zsh
   lazaret completion fish > ~/.config/fish/completions/lazaret.fish`,
	Action: func(c *cli.Context) error {
		if c.NArg() != 1 {
			return errdefs.New(errdefs.ErrInvalid, "name one shell: lazaret completion bash|zsh|fish")
		}
		switch c.Args().First() {
		case "bash":
			_, err := fmt.Fprint(c.App.Writer, bashCompletion)
			return err
		case "zsh":
			_, err := fmt.Fprint(c.App.Writer, zshCompletion)
			return err
		case "fish":
			s, err := c.App.ToFishCompletion()
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(c.App.Writer, s)
			return err
		}
		return errdefs.New(errdefs.ErrInvalid, "unknown shell %q: lazaret completion bash|zsh|fish", c.Args().First())
	},
}

// manCommand prints the manual page (roff) generated from the command tree;
// make install writes it to PREFIX/share/man/man1/lazaret.1.
var manCommand = &cli.Command{
	Name:   "man",
	Usage:  "print the lazaret(1) manual page (roff)",
	Hidden: true,
	Action: func(c *cli.Context) error {
		s, err := c.App.ToManWithSection(1)
		if err != nil {
			return err
		}
		_, err = fmt.Fprint(c.App.Writer, s)
		return err
	},
}

// bashCompletion is urfave/cli v2's autocomplete/bash_autocomplete for lazaret.
const bashCompletion = `# bash completion for lazaret
_lazaret_complete() {
  local cur words cword opts requestComp
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if declare -F _init_completion >/dev/null 2>&1; then
    _init_completion -n "=:" || return
  else
    words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
  fi
  words=("${words[@]:0:$cword}")
  if [[ "$cur" == "-"* ]]; then
    requestComp="${words[*]} ${cur} --generate-bash-completion"
  else
    requestComp="${words[*]} --generate-bash-completion"
  fi
  opts=$(eval "${requestComp}" 2>/dev/null)
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -o nospace -F _lazaret_complete lazaret
`

// zshCompletion works both sourced and autoloaded from $fpath as _lazaret.
const zshCompletion = `#compdef lazaret
_lazaret() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
if [ "$funcstack[1]" = "_lazaret" ]; then
  _lazaret "$@"
else
  compdef _lazaret lazaret
fi
`
