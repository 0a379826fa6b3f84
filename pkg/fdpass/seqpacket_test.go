package fdpass

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
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

// TestRecvBufferFitsPacket: packets of several sizes arrive whole, and
// receiving small ones allocates per packet about its size, not MaxPacket.
func TestRecvBufferFitsPacket(t *testing.T) {
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromFD(adopt(t, bf))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, size := range []int{0, 1, 1000, 100 << 10} {
		sent := &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "c", Message: strings.Repeat("m", size)}}}
		if err := a.Send(ctx, sent); err != nil {
			t.Fatal(err)
		}
		var got lv1.SupervisorMessage
		if err := b.Recv(ctx, &got); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if len(got.GetFailure().GetMessage()) != size || got.GetFailure().GetCategory() != "c" {
			t.Fatalf("size %d: got %d bytes", size, len(got.GetFailure().GetMessage()))
		}
	}
	const n = 50
	sent := &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "c", Message: "small"}}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		if err := a.Send(ctx, sent); err != nil {
			t.Fatal(err)
		}
		var got lv1.SupervisorMessage
		if err := b.Recv(ctx, &got); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 16<<10 {
		t.Fatalf("%d bytes allocated per small message", per)
	}
}

// TestOversizedPacketRefused: a packet over MaxPacket is consumed and
// refused, and the next one is read.
func TestOversizedPacketRefused(t *testing.T) {
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromFD(adopt(t, bf))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := a.c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	fd.Control(func(fd uintptr) {
		// Beyond wmem_max only with CAP_NET_ADMIN (SO_SNDBUFFORCE).
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4*MaxPacket)
	})
	if serr != nil {
		msg := fmt.Sprintf("cannot raise the send buffer above MaxPacket (SO_SNDBUFFORCE needs CAP_NET_ADMIN; run the unit tests as root, as make test does): %v", serr)
		if os.Getenv("CI") != "" {
			t.Fatal(msg) // CI runs as root: a missing capability is a broken runner
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.c.Write(make([]byte, MaxPacket+100)); err != nil {
		t.Fatal(err)
	}
	sent := &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "c", Message: "after"}}}
	if err := a.Send(ctx, sent); err != nil {
		t.Fatal(err)
	}
	var got lv1.SupervisorMessage
	if err := b.Recv(ctx, &got); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("oversized: want corrupt, got %v", err)
	}
	if err := b.Recv(ctx, &got); err != nil || got.GetFailure().GetMessage() != "after" {
		t.Fatalf("after the oversized packet: %v %v", &got, err)
	}
}
