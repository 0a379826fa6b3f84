// Package proctest holds what tests of several packages need from package
// proc: the spawn/reap broker of the test process itself.
package proctest

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/proc"
)

// SelfBroker is proc.NewSelfBroker for a test: the broker of the running
// test binary, its log discarded; a failure fails t.
func SelfBroker(t testing.TB) *proc.Broker {
	t.Helper()
	b, err := proc.NewSelfBroker(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
