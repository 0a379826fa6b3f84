// Package control is the framing of the Client CLI ↔ Host Coordinator
// protocol (api/lazaret/v1/control.proto) over the host-private unix stream
// socket: each frame is a 4-byte big-endian length and one protobuf record.
// Decoding is bounded before allocation and a malformed frame is an error
// for that connection only.
package control

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// MaxFrame bounds one frame's payload.
const MaxFrame = 1 << 20

// Conn reads and writes frames on a stream. Writes are serialized; reads
// must come from one goroutine.
type Conn struct {
	rw  io.ReadWriter
	wmu sync.Mutex
	hdr [4]byte
}

// NewConn wraps rw.
func NewConn(rw io.ReadWriter) *Conn { return &Conn{rw: rw} }

// Write sends m as one frame.
func (c *Conn) Write(m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return errdefs.New(errdefs.ErrInvalid, "frame of %d bytes exceeds %d", len(b), MaxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.rw.Write(buf)
	return err
}

// Read receives one frame into m. io.EOF means the peer closed cleanly
// between frames.
func (c *Conn) Read(m proto.Message) error { return c.ReadMax(m, MaxFrame) }

// ReadMax is Read with a tighter bound, checked before allocation (e.g. the
// enrollment frame of an unauthenticated connection).
func (c *Conn) ReadMax(m proto.Message, max uint32) error {
	if _, err := io.ReadFull(c.rw, c.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return errdefs.New(errdefs.ErrCorrupt, "truncated frame header")
		}
		return err
	}
	n := binary.BigEndian.Uint32(c.hdr[:])
	if n > max {
		return errdefs.New(errdefs.ErrCorrupt, "frame length %d exceeds %d", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.rw, b); err != nil {
		return errdefs.Mark(fmt.Errorf("truncated frame: %w", err), errdefs.ErrCorrupt)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return errdefs.Mark(fmt.Errorf("decode frame: %w", err), errdefs.ErrCorrupt)
	}
	return nil
}
