package sandboxinit

import (
	"reflect"
	"testing"
)

// TestLaunchEnv: the launcher drops every GOMAXPROCS entry (its own) and
// keeps the rest in order.
func TestLaunchEnv(t *testing.T) {
	in := []string{"PATH=/bin", "GOMAXPROCS=1", "GOMAXPROCS_X=2", "HOME=/root"}
	got := launchEnv(in)
	if want := []string{"PATH=/bin", "GOMAXPROCS_X=2", "HOME=/root"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("launchEnv = %q, want %q", got, want)
	}
	if in[1] != "GOMAXPROCS=1" {
		t.Fatalf("launchEnv changed its input: %q", in)
	}
}
