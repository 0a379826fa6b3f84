package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

var auditCommand = &cli.Command{
	Name:  "audit",
	Usage: "show the host escalation audit log: requests, decisions, host executions, results",
	Description: `Every host escalation request, decision (who decided: the session and its
Client CLI, an auto_approve rule, or no terminal), host execution and result is
appended (fsynced) to <Domain Root>/audit.jsonl. This shows every Domain's log,
oldest first.

Examples:
   lazaret audit
   lazaret audit --since 1h
   lazaret audit --since 2026-11-30T04:00:00Z --json`,
	Flags: []cli.Flag{
		&cli.BoolFlag{Name: "json", Usage: "one JSON object per line (the log's own format)"},
		&cli.StringFlag{Name: "since", Usage: "only entries at or after a duration ago (90m) or an RFC 3339 time"},
		&cli.StringFlag{Name: "domain", Usage: "only this Domain ID"},
	},
	Action: func(c *cli.Context) error {
		if os.Geteuid() == 0 {
			return errdefs.New(errdefs.ErrRefused, "run lazaret audit as the user whose Domains you want to see, not as root")
		}
		since, err := parseSince(c.String("since"), time.Now())
		if err != nil {
			return err
		}
		roots, err := domain.DefaultRoots(os.Getenv, os.Getuid())
		if err != nil {
			return err
		}
		entries, err := auditEntries(filepath.Join(roots.Storage, "domains"), c.String("domain"), since)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			for _, e := range entries {
				if err := enc.Encode(e); err != nil {
					return err
				}
			}
			return nil
		}
		if len(entries) == 0 {
			fmt.Fprintln(c.App.Writer, "no host escalations recorded")
			return nil
		}
		for _, e := range entries {
			fmt.Fprintln(c.App.Writer, audit.Format(e))
		}
		return nil
	},
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, errdefs.New(errdefs.ErrInvalid, "--since %q: give a duration such as 90m or an RFC 3339 time such as 2026-11-30T04:00:00Z", s)
}

// auditEntries reads every Domain's audit log (or one Domain's), oldest
// first.
func auditEntries(domainsDir, only string, since time.Time) ([]audit.Entry, error) {
	dirs, err := os.ReadDir(domainsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []audit.Entry
	for _, d := range dirs {
		if !domain.ID(d.Name()).Valid() || (only != "" && d.Name() != only) {
			continue
		}
		f, err := os.Open(filepath.Join(domainsDir, d.Name(), audit.FileName))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		es, err := audit.Read(f, since)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("Domain %s: %w", d.Name(), err)
		}
		out = append(out, es...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}
