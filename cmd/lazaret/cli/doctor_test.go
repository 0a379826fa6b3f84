package cli

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/hostcheck"
)

type info struct{ mode os.FileMode }

func (i info) Name() string       { return "x" }
func (i info) Size() int64        { return 0 }
func (i info) Mode() os.FileMode  { return i.mode }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return false }
func (i info) Sys() any           { return nil }

// TestDoctorReportsEveryFailureWithItsFix: with injected probes presenting
// a broken host, doctor lists each failing check with its remedy (it does
// not stop at the first), and none when the host is good.
func TestDoctorReportsEveryFailureWithItsFix(t *testing.T) {
	bad := hostcheck.Host{
		Euid: 0, Uid: 0, Username: "dev",
		Uname: func() (hostcheck.Uname, error) {
			return hostcheck.Uname{Release: "6.1.0", Version: "#1", Machine: "x86_64"}, nil
		},
		ReadFile: func(string) ([]byte, error) { return []byte(""), nil },
		OpenRW:   func(string) error { return errors.New("permission denied") },
		LookPath: func(n string) (string, error) { return "", errors.New("missing") },
		Stat:     func(string) (os.FileInfo, error) { return info{}, nil },
	}
	rs := doctorChecks(bad, func(string) string { return "" })
	got := doctorFailures(rs)
	for _, want := range []string{"not root", "kernel", "subordinate ids", "newuidmap/newgidmap", "/dev/net/tun", "/dev/fuse"} {
		if !strings.Contains(got, want) {
			t.Errorf("failure %q not reported (got %s)", want, got)
		}
	}
	fixes := map[string]string{"not root": "normal user", "kernel": "upgrade the kernel", "subordinate ids": "usermod --add-subuids", "newuidmap/newgidmap": "apt-get install uidmap", "/dev/net/tun": "chmod 0666 /dev/net/tun", "/dev/fuse": "chmod 0666 /dev/fuse"}
	for _, r := range rs {
		if fix, ok := fixes[r.Check]; ok && !strings.Contains(r.Detail, fix) {
			t.Errorf("%s: remedy %q does not name %q", r.Check, r.Detail, fix)
		}
	}
}
