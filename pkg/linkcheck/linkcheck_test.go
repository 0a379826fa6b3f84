package linkcheck

import "testing"

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		dep, rule string
		want      bool
	}{
		{"net/http", "net/http", true},
		{"net/http/httptrace", "net/http", true},
		{"net/httpx", "net/http", false},
		{"go.podman.io/storage", "go.podman.io/", true},
		{"go.podman.io", "go.podman.io/", false},
		{"google.golang.org/protobuf/proto", "google.golang.org/protobuf", true},
	} {
		if got := Matches(c.dep, c.rule); got != c.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", c.dep, c.rule, got, c.want)
		}
	}
}

// TestForbiddenListsThisPackagesDeps: the go command's real listing of
// this package includes "testing" and "os/exec", and nothing unrelated.
func TestForbiddenListsThisPackagesDeps(t *testing.T) {
	vs := Forbidden(t, ".", []string{"os/exec", "net/http"})
	if len(vs) != 1 || vs[0] != (Violation{"os/exec", "os/exec"}) {
		t.Fatalf("violations %v, want only os/exec", vs)
	}
}
