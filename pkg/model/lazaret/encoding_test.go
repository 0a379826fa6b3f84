package lazaret

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// TestEncodingIsFaithful cross-checks the checker against a naive
// exploration keyed by the whole State struct: the canonical encoding must
// round-trip every reachable state and neither merge nor split states, so
// both explorations must count the same states.
func TestEncodingIsFaithful(t *testing.T) {
	m := New(Reduced())
	sp := m.Spec()
	seen := map[State]bool{}
	init := m.Init()
	queue := []State{init}
	seen[init] = true
	buf := make([]byte, sp.StateSize)
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		clear(buf)
		sp.Encode(buf, s)
		if sp.Decode(buf) != s {
			t.Fatalf("encoding does not round-trip:\n%s", m.Format(s))
		}
		sp.Next(s, func(_ int, u State) {
			if !seen[u] {
				seen[u] = true
				queue = append(queue, u)
			}
		})
	}
	res := check.Run(sp, check.Options{})
	if res.Distinct != len(seen) {
		t.Fatalf("checker found %d states, naive exploration %d", res.Distinct, len(seen))
	}
	t.Logf("%d states agree", len(seen))
}
