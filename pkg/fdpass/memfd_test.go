package fdpass

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestSealedMemfd(t *testing.T) {
	f, err := SealedMemfd("policy", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("j"), 0); err == nil {
		t.Fatal("write to a sealed memfd succeeded")
	}
	dup, _ := unix.Dup(int(f.Fd()))
	b, err := ReadSealedMemfd(dup, 100)
	if err != nil || string(b) != "hello" {
		t.Fatalf("%q %v", b, err)
	}
	dup, _ = unix.Dup(int(f.Fd()))
	if _, err := ReadSealedMemfd(dup, 3); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("oversize: %v", err)
	}
	// An unsealed memfd and a plain pipe are refused.
	fd, _ := unix.MemfdCreate("x", unix.MFD_ALLOW_SEALING)
	if _, err := ReadSealedMemfd(fd, 100); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("unsealed: %v", err)
	}
	var p [2]int
	unix.Pipe(p[:])
	if _, err := ReadSealedMemfd(p[0], 100); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("pipe: %v", err)
	}
}
