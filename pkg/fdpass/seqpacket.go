// Package fdpass carries protobuf messages over an inherited SOCK_SEQPACKET
// socketpair (the private Host Coordinator ↔ Runtime Supervisor channel),
// one message with descriptors over another (SendFiles, RecvFiles: the CLI
// handing a standby coordinator its start) and names inherited
// descriptors. One packet is exactly one message; a packet larger than its
// bound or a truncated one is refused, never reassembled.
package fdpass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// MaxPacket bounds one message.
const MaxPacket = 1 << 20

// Channel is one end of a SEQPACKET socketpair.
type Channel struct {
	c      *socket.Conn
	recvMu sync.Mutex // a Recv peeks, then reads, the same packet
}

// Pair creates a connected socketpair: the first end is kept, the second is
// returned as an *os.File to hand to a child (without CLOEXEC only in the
// child, which the spawner arranges by listing it in the child's files).
func Pair() (*Channel, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	c, err := socket.New(fds[0], "seqpacket")
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return &Channel{c: c}, os.NewFile(uintptr(fds[1]), "seqpacket-peer"), nil
}

// FromFD adopts an inherited SEQPACKET descriptor, verifying its type.
func FromFD(fd int) (*Channel, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("inherited fd %d is not a socket: %w", fd, err), errdefs.ErrInvalid)
	}
	if typ != unix.SOCK_SEQPACKET {
		return nil, errdefs.New(errdefs.ErrInvalid, "inherited fd %d is not a SOCK_SEQPACKET socket", fd)
	}
	unix.CloseOnExec(fd)
	c, err := socket.New(fd, "seqpacket")
	if err != nil {
		return nil, err
	}
	return &Channel{c: c}, nil
}

// Send writes m as one packet.
func (ch *Channel) Send(ctx context.Context, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxPacket {
		return errdefs.New(errdefs.ErrInvalid, "message of %d bytes exceeds %d", len(b), MaxPacket)
	}
	_, err = ch.c.WriteContext(ctx, b)
	return err
}

// Recv reads one packet into m. A closed peer returns io.EOF-like errors
// (ErrClosed); a malformed or truncated packet returns ErrCorrupt. Calls
// are serialized.
//
// The buffer fits the packet: its length is peeked first (MSG_PEEK with
// MSG_TRUNC returns a packet's real length), so that a receiver waiting
// for its next message does not keep a MaxPacket buffer allocated.
func (ch *Channel) Recv(ctx context.Context, m proto.Message) error {
	ch.recvMu.Lock()
	defer ch.recvMu.Unlock()
	var peek [1]byte
	size, _, _, _, err := ch.c.Recvmsg(ctx, peek[:], nil, unix.MSG_PEEK|unix.MSG_TRUNC)
	if errors.Is(err, io.EOF) {
		return ErrClosed
	}
	if err != nil {
		return err
	}
	// An empty packet is consumed and read as the peer closing, as
	// before; an oversized one is consumed into a MaxPacket+1 buffer
	// and refused.
	size = min(max(size, 1), MaxPacket+1)
	buf := make([]byte, size)
	n, _, flags, _, err := ch.c.Recvmsg(ctx, buf, nil, 0)
	if errors.Is(err, io.EOF) {
		return ErrClosed
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrClosed
	}
	if flags&unix.MSG_TRUNC != 0 || n > MaxPacket {
		return errdefs.New(errdefs.ErrCorrupt, "oversized packet from peer")
	}
	if err := proto.Unmarshal(buf[:n], m); err != nil {
		return errdefs.Mark(fmt.Errorf("decode packet: %w", err), errdefs.ErrCorrupt)
	}
	return nil
}

// Close closes the channel.
func (ch *Channel) Close() error { return ch.c.Close() }

// ErrClosed reports that the peer closed the channel.
var ErrClosed = errdefs.New(errdefs.ErrUnavailable, "peer closed the channel")

// SigningPayload is the deterministic encoding of m that the HC↔RS
// ownership messages sign; the caller passes m with its signature unset.
func SigningPayload(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
