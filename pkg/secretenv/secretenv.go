// Package secretenv resolves the credentials a session of an Agent Profile
// receives (spec FR-9: credentials are not configuration): the variables
// named by env_pass, copied from the invoking environment, and the
// profile's secrets, read from a variable or from the standard output of a
// host command.
//
// Resolution happens in the Client CLI, on the host, as the developer,
// before it asks for a Domain: a missing value is an error before anything
// starts, and a secret command (`pass show anthropic`) can prompt at the
// developer's terminal. The values travel to the Host Coordinator in the
// session's RunRequest only; they are never part of the profile, its
// fingerprint, the Domain Store or a log line, and error messages name the
// variable and the command, never a value or the command's output.
package secretenv

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// MaxValue bounds one value (a command's output beyond it is refused).
const MaxValue = 64 << 10

// Runner runs a secret command (argv, no shell) on the host with the
// developer's terminal for prompts and returns its standard output, up to
// limit bytes. A non-nil error means it did not succeed; the error names
// the exit status, never the output.
type Runner func(ctx context.Context, argv []string, limit int64) ([]byte, error)

// ErrMissing marks a credential that could not be resolved.
var ErrMissing = errors.New("credential not available")

// Resolve returns the value of every name of p.SecretNames(). lookup is the
// invoking environment (os.LookupEnv). Every problem is reported at once;
// the error is errdefs.ErrInvalid and ErrMissing.
func Resolve(ctx context.Context, p *config.Profile, lookup func(string) (string, bool), run Runner) (map[string]string, error) {
	out := map[string]string{}
	var problems []string
	for _, n := range p.EnvPass {
		v, ok := lookup(n)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s (env_pass) is not set in your environment: export %s before lazaret run, or remove it from env_pass", n, n))
			continue
		}
		out[n] = v
	}
	names := make([]string, 0, len(p.Secrets))
	for n := range p.Secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := p.Secrets[n]
		if s.Env != "" {
			v, ok := lookup(s.Env)
			if !ok {
				problems = append(problems, fmt.Sprintf("secret %s reads %s, which is not set in your environment: export %s before lazaret run, or change secrets.%s", n, s.Env, s.Env, n))
				continue
			}
			out[n] = v
			continue
		}
		b, err := run(ctx, s.Command, MaxValue+1)
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %s: the command %s failed (%v): run it yourself to see why, or change secrets.%s", n, s, err, n))
			continue
		}
		if len(b) > MaxValue {
			problems = append(problems, fmt.Sprintf("secret %s: the command %s printed more than %d bytes: a secret is one value", n, s, MaxValue))
			continue
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			problems = append(problems, fmt.Sprintf("secret %s: the command %s printed nothing: check that it prints the value", n, s))
			continue
		}
		out[n] = v
	}
	for n, v := range out {
		if strings.ContainsRune(v, 0) {
			delete(out, n)
			problems = append(problems, fmt.Sprintf("the value of %s contains a NUL byte, which an environment cannot carry", n))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, errdefs.Mark(fmt.Errorf("%w for profile %q (nothing was started): %s", ErrMissing, p.Name, strings.Join(problems, "; ")), errdefs.ErrInvalid)
	}
	return out, nil
}

// Check verifies that got has exactly the names p declares: the Host
// Coordinator refuses a request carrying any other variable or missing one.
func Check(p *config.Profile, got map[string]string) error {
	want := map[string]bool{}
	for _, n := range p.SecretNames() {
		want[n] = true
		if _, ok := got[n]; !ok {
			return errdefs.New(errdefs.ErrInvalid, "the session's credential %s was not resolved by the CLI: use matching lazaret binaries", n)
		}
	}
	for n, v := range got {
		if !want[n] {
			return errdefs.New(errdefs.ErrInvalid, "credential %s is not in profile %q's env_pass or secrets", n, p.Name)
		}
		if strings.ContainsRune(v, 0) || len(v) > MaxValue {
			return errdefs.New(errdefs.ErrInvalid, "credential %s has a NUL byte or is longer than %d bytes", n, MaxValue)
		}
	}
	return nil
}
