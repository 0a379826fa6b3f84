package fdpass

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestRoundTripAndClose(t *testing.T) {
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromFD(adopt(t, bf))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sent := &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "refused", Message: "x"}}}
	if err := a.Send(ctx, sent); err != nil {
		t.Fatal(err)
	}
	var got lv1.SupervisorMessage
	if err := b.Recv(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetFailure().GetMessage() != "x" {
		t.Fatalf("got %v", &got)
	}
	a.Close()
	if err := b.Recv(ctx, &got); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestCorruptPacketRefused(t *testing.T) {
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromFD(adopt(t, bf))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.c.Write([]byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	var got lv1.SupervisorMessage
	if err := b.Recv(ctx, &got); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("want corrupt, got %v", err)
	}
}

func TestFromFDRefusesStream(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := FromFD(fds[0]); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("want invalid, got %v", err)
	}
}

// adopt hands FromFD a descriptor of its own: the *os.File keeps (and its
// finalizer would close) the original, as a child's inherited copy would not.
func adopt(t *testing.T, f *os.File) int {
	t.Helper()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return fd
}
