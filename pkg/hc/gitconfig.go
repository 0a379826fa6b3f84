package hc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/proc"
)

// gitSetting is one key of the developer's Git configuration.
type gitSetting struct{ key, value string }

// gitIdentityKeys are the settings guest processes inherit, in this order.
var gitIdentityKeys = []string{"user.name", "user.email"}

// hostGitTimeout bounds each host Git run reading configuration.
const hostGitTimeout = 5 * time.Second

// hostGitOutputLimit bounds the output of one such run; a longer one is
// refused rather than read in part.
const hostGitOutputLimit = 4 << 20

// hostGitEnv is the environment of host Git reading configuration: the
// developer's home and XDG configuration directory, and the variables
// that choose its global and system files, as in the developer's shell.
func hostGitEnv() []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + os.Getenv("HOME")}
	for _, k := range []string{"XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// readHostGitConfig starts reading the developer's effective Git
// configuration for the workspace with the host's own Git, through the
// broker (package gitconfigguard: `git config --show-origin --show-scope
// -z --list`, and every include Git did not follow), and returns the
// function that waits for it. Its result gives the guest processes the
// developer's identity (a repository-local one wins, as on the host) and
// the Git Sentry what host Git runs or reads from the workspace.
//
// No Git on the host is no configuration (nothing to protect from a Git
// that is not there); a Git that fails fails the generation, because what
// it would run cannot be known.
func (c *coordinator) readHostGitConfig() func() (gitconfigguard.Result, error) {
	type result struct {
		r   gitconfigguard.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		git, err := locate.Find("git", func(string) string { return "" })
		if err != nil {
			if c.log != nil {
				c.log.Warn("no host git: no host Git configuration to protect beyond the Git Sentry", "err", err)
			}
			done <- result{}
			return
		}
		env := hostGitEnv()
		read := func(args []string) ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.Background(), hostGitTimeout)
			defer cancel()
			out, stderr, st, err := c.broker.Output(ctx, "git config", proc.Command{Path: git, Args: append([]string{"git"}, args...), Env: env, Dir: c.cfg.workspace}, hostGitOutputLimit)
			switch {
			case err != nil:
				return nil, fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
			case st.ShellCode() != 0:
				return nil, errdefs.New(errdefs.ErrRefused, "`git %s` in %s exited %d: %s; fix the configuration it names (host Git fails there too), then start again", strings.Join(args, " "), c.cfg.workspace, st.ShellCode(), strings.TrimSpace(string(stderr)))
			case len(out) >= hostGitOutputLimit:
				return nil, errdefs.New(errdefs.ErrRefused, "`git %s` in %s printed more than %d bytes; Lazaret reads all of it to protect what host Git runs: reduce the configuration", strings.Join(args, " "), c.cfg.workspace, hostGitOutputLimit)
			}
			return out, nil
		}
		home := os.Getenv("HOME")
		r, err := gitconfigguard.Compute(gitconfigguard.Input{Workspace: c.cfg.workspace, TopLevel: gitconfigguard.TopLevel(c.cfg.workspace), Home: home, Dir: c.cfg.workspace}, read)
		done <- result{r, err}
	}()
	return func() (gitconfigguard.Result, error) {
		r := <-done
		return r.r, r.err
	}
}

// gitIdentity keeps, like `git config --get`, the last value of each
// identity key of the effective configuration (Git lists its files from
// system to worktree); empty values and keys without a value are no
// identity.
func gitIdentity(ents []gitconfigguard.Entry) []gitSetting {
	last := map[string]string{}
	for _, e := range ents {
		if e.NoValue {
			continue // "[user] name" alone
		}
		last[strings.ToLower(e.Key)] = e.Value
	}
	var gs []gitSetting
	for _, k := range gitIdentityKeys {
		if v := strings.TrimSpace(last[k]); v != "" {
			gs = append(gs, gitSetting{k, v})
		}
	}
	return gs
}

// hostGitPoll is how often a running Domain checks whether host Git's
// configuration changed: a stat of each path it depends on
// (gitconfigguard.Result.Watch), and host Git run again only when one
// changed.
var hostGitPoll = time.Second

// watchHostGit keeps the Git-routing daemon's guard (SR-4) current while
// the Domain runs, from its publication until its teardown begins: host
// Git's configuration may change meanwhile (`husky install` setting
// core.hooksPath, a new include, a submodule added), and what host Git
// would then run from the workspace must become read-only inside at once,
// not at the next start. first is what StartSandbox was built from. A
// configuration host Git cannot read now leaves the guard in force.
func (c *coordinator) watchHostGit(first gitconfigguard.Result) {
	watch := hostGitWatchSet(first, c.cfg.workspace)
	// The first tick reads host Git again whatever the paths show: first
	// was read when the coordinator started, and a change since then must
	// count too. (A Domain started for one short command is gone by then.)
	last := ""
	t := time.NewTicker(hostGitPoll)
	defer t.Stop()
	for {
		select {
		case <-c.teardownC:
			return
		case <-t.C:
		}
		// Taken before host Git reads: a change while it runs shows at the
		// next tick.
		fp := fingerprintPaths(watch, c.cfg.workspace)
		if fp == last {
			continue
		}
		r, err := c.readHostGitConfig()()
		if err != nil {
			c.log.Warn("host Git's configuration changed and cannot be read now: the Git configuration guard in force stays", "err", err)
			last = fp
			continue
		}
		if now := hostGitWatchSet(r, c.cfg.workspace); slices.Equal(now, watch) {
			last = fp
		} else {
			watch, last = now, fingerprintPaths(now, c.cfg.workspace)
		}
		files, trees, changed := c.routing.GuardUpdate(r.Paths)
		if !changed {
			continue
		}
		select {
		case <-c.teardownC:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = c.rs.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_GitGuardUpdate{GitGuardUpdate: &lv1.GitGuardUpdate{Files: files, Trees: trees}}})
		cancel()
		if err != nil {
			c.log.Error("host Git's configuration changed: the new Git configuration guard was not sent to the runtime supervisor", "err", err)
			continue
		}
		c.log.Info("host Git's configuration changed while the Domain ran: Git configuration guard updated",
			"guarded_files", strings.Join(files, " "), "guarded_trees", strings.Join(trees, " "))
	}
}

// hostGitWatchSet is r.Watch and the global and system configuration
// files Git reads when they exist (a new ~/.gitconfig counts too).
func hostGitWatchSet(r gitconfigguard.Result, ws string) []string {
	set := append([]string{}, r.Watch...)
	if home := os.Getenv("HOME"); home != "" {
		set = append(set, filepath.Join(home, ".gitconfig"), filepath.Join(home, ".config", "git", "config"))
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		set = append(set, filepath.Join(x, "git", "config"))
	}
	set = append(set, "/etc/gitconfig")
	slices.Sort(set)
	return slices.Compact(set) // a global file Git read is in r.Watch too
}

// fingerprintPaths is what a stat shows of each path: its kind, identity,
// size and times, or its absence. The workspace's .git counts by kind and
// identity only: its own times change with every Git command.
func fingerprintPaths(paths []string, ws string) string {
	var b strings.Builder
	top := filepath.Join(ws, ".git")
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			fmt.Fprintf(&b, "%s -\n", p)
			continue
		}
		if p == top {
			fmt.Fprintf(&b, "%s %o %d:%d\n", p, st.Mode&unix.S_IFMT, st.Dev, st.Ino)
			continue
		}
		fmt.Fprintf(&b, "%s %o %d:%d %d %d.%d %d.%d\n", p, st.Mode&unix.S_IFMT, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return b.String()
}
