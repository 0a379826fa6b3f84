package rs

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

// TestPeekPolicyMode: RS reads the mode from the sealed policy memfd
// without consuming it (checkPolicy reads it whole later), and refuses a
// memfd larger than netpolicy.MaxCanonicalSize instead of reading part of it.
func TestPeekPolicyMode(t *testing.T) {
	for _, mode := range []netpolicy.Mode{netpolicy.ModeDeny, netpolicy.ModeAllowlist} {
		p, err := netpolicy.Derive(netpolicy.Input{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		f, err := fdpass.SealedMemfd("policy", p.Canonical())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got, err := peekPolicyMode(int(f.Fd()))
		if err != nil || got != mode {
			t.Fatalf("mode %q: peeked %q, %v", mode, got, err)
		}
		dup, err := unix.Dup(int(f.Fd())) // ReadSealedMemfd closes what it reads
		if err != nil {
			t.Fatal(err)
		}
		raw, err := fdpass.ReadSealedMemfd(dup, netpolicy.MaxCanonicalSize)
		if err != nil || string(raw) != string(p.Canonical()) {
			t.Fatalf("mode %q: the policy after the peek: %q, %v", mode, raw, err)
		}
	}
	big, err := fdpass.SealedMemfd("policy", make([]byte, netpolicy.MaxCanonicalSize+1))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if _, err := peekPolicyMode(int(big.Fd())); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("a policy memfd of %d bytes: %v, want ErrRefused", netpolicy.MaxCanonicalSize+1, err)
	}
}
