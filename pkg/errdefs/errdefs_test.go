package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestMarkKeepsTextAndCategory(t *testing.T) {
	base := errors.New("open x: permission denied")
	err := fmt.Errorf("start: %w", Mark(base, ErrUnsupportedHost))
	if err.Error() != "start: open x: permission denied" {
		t.Fatalf("text changed: %q", err)
	}
	if !errors.Is(err, ErrUnsupportedHost) || !errors.Is(err, base) {
		t.Fatalf("lost category or cause")
	}
	if errors.Is(err, ErrRefused) {
		t.Fatalf("wrong category matched")
	}
	if Mark(nil, ErrRefused) != nil {
		t.Fatalf("Mark(nil) must be nil")
	}
}

func TestCategoryRoundTrip(t *testing.T) {
	for _, cat := range []error{ErrRefused, ErrUnsupportedHost, ErrInvalid, ErrUnavailable, ErrCorrupt, ErrInternal} {
		err := New(cat, "x")
		if got := FromCategory(Category(err)); got != cat {
			t.Errorf("%v: round trip gave %v", cat, got)
		}
	}
	if Category(errors.New("plain")) != "internal" {
		t.Errorf("uncategorised error must be internal")
	}
}
