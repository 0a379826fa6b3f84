// Package errdefs defines Lazaret's error categories. Errors are wrapped with
// %w and lower-case operation context; callers decide by category with
// errors.Is, never by message text. A refusal is never downgraded to a retry.
package errdefs

import (
	"errors"
	"fmt"
)

// Categories. Each is a sentinel to be matched with errors.Is.
var (
	// ErrRefused: Lazaret will not do this (unsafe, mismatched identity,
	// unsupported input). Retrying without a change will refuse again.
	ErrRefused = errors.New("refused")
	// ErrUnsupportedHost: the host lacks a prerequisite (kernel, subuid
	// ranges, device permissions, runsc).
	ErrUnsupportedHost = errors.New("unsupported host")
	// ErrInvalid: bad input from the developer (arguments, paths, profile).
	ErrInvalid = errors.New("invalid input")
	// ErrUnavailable: a transient condition (Domain stopping, peer busy).
	ErrUnavailable = errors.New("unavailable")
	// ErrCorrupt: persisted or received data failed validation.
	ErrCorrupt = errors.New("corrupt")
	// ErrInternal: a Lazaret bug or unexpected system failure.
	ErrInternal = errors.New("internal error")
)

// categorised attaches a category to an error without changing its text.
type categorised struct {
	cat error
	err error
}

func (c *categorised) Error() string { return c.err.Error() }
func (c *categorised) Unwrap() []error {
	return []error{c.err, c.cat}
}

// Mark returns err marked with category cat (one of the sentinels above).
func Mark(err, cat error) error {
	if err == nil {
		return nil
	}
	return &categorised{cat: cat, err: err}
}

// New formats a message and marks it with cat.
func New(cat error, format string, args ...any) error {
	return Mark(fmt.Errorf(format, args...), cat)
}

// Category returns the stable word naming err's category, used on the wire.
func Category(err error) string {
	switch {
	case errors.Is(err, ErrRefused):
		return "refused"
	case errors.Is(err, ErrUnsupportedHost):
		return "unsupported-host"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	default:
		return "internal"
	}
}

// FromCategory maps a wire category word back to its sentinel.
func FromCategory(word string) error {
	switch word {
	case "refused":
		return ErrRefused
	case "unsupported-host":
		return ErrUnsupportedHost
	case "invalid":
		return ErrInvalid
	case "unavailable":
		return ErrUnavailable
	case "corrupt":
		return ErrCorrupt
	default:
		return ErrInternal
	}
}
