// Package control is the framing of the Client CLI ↔ Host Coordinator
// protocol (api/lazaret/v1/control.proto) over the host-private unix stream
// socket: each frame is a 4-byte big-endian length and one protobuf record.
// Decoding is bounded before allocation and a malformed frame is an error
// for that connection only.
//
// Terminal output has a copy-free fast path (WriteOutput): the caller reads
// bytes into a buffer behind OutputHeadroom spare bytes and the frame header
// and protobuf prefix are encoded in place in front of them; the bytes on
// the wire are exactly those Write would send for the same ServerFrame.
package control

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// MaxFrame bounds one frame's payload.
const MaxFrame = 1 << 20

// ProgressWarning starts a Progress message that warns about the
// generation as it runs (e.g. an allowed host that did not resolve): the
// CLI prints it even when its stderr is not a terminal, and the Host
// Coordinator sends it to sessions that join the running generation too.
const ProgressWarning = "warning: "

// Conn reads and writes frames on a stream. Writes are serialized; reads
// must come from one goroutine.
type Conn struct {
	rw    io.ReadWriter
	batch WriteBatcher // nil: frames go straight to rw
	wmu   sync.Mutex
	hdr   [4]byte
	rbuf  []byte // reused by reads (Unmarshal copies what it keeps)
}

// NewConn wraps rw.
func NewConn(rw io.ReadWriter) *Conn { return &Conn{rw: rw} }

// WriteBatcher is the transport beneath a stream that writes one frame in
// several pieces (TLS: one record per 16 KiB): between Hold and Flush the
// pieces accumulate, and Flush sends them together (rawio.Conn).
type WriteBatcher interface {
	Hold()
	Flush() error
}

// NewBatchedConn wraps rw, a stream over b: each frame leaves b in one
// write, so the peer wakes once per frame.
func NewBatchedConn(rw io.ReadWriter, b WriteBatcher) *Conn { return &Conn{rw: rw, batch: b} }

// send writes one encoded frame (the caller holds wmu).
func (c *Conn) send(frame []byte) error {
	if c.batch == nil {
		_, err := c.rw.Write(frame)
		return err
	}
	c.batch.Hold()
	_, err := c.rw.Write(frame)
	if ferr := c.batch.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Write sends m as one frame.
func (c *Conn) Write(m proto.Message) error {
	size := proto.Size(m)
	if size > MaxFrame {
		return errdefs.New(errdefs.ErrInvalid, "frame of %d bytes exceeds %d", size, MaxFrame)
	}
	buf, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(make([]byte, 4, 4+size), m)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.send(buf)
}

// Read receives one frame into m. io.EOF means the peer closed cleanly
// between frames.
func (c *Conn) Read(m proto.Message) error { return c.ReadMax(m, MaxFrame) }

// ReadMax is Read with a tighter bound, checked before allocation (e.g. the
// enrollment frame of an unauthenticated connection).
func (c *Conn) ReadMax(m proto.Message, max uint32) error {
	b, err := c.ReadRaw(max)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return errdefs.Mark(fmt.Errorf("decode frame: %w", err), errdefs.ErrCorrupt)
	}
	return nil
}

// ReadRaw receives one frame's payload (at most max bytes, checked before
// allocation) without decoding it. The bytes are valid until the next read.
func (c *Conn) ReadRaw(max uint32) ([]byte, error) {
	if _, err := io.ReadFull(c.rw, c.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, errdefs.New(errdefs.ErrCorrupt, "truncated frame header")
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(c.hdr[:])
	if n > max {
		return nil, errdefs.New(errdefs.ErrCorrupt, "frame length %d exceeds %d", n, max)
	}
	if uint32(cap(c.rbuf)) < n {
		c.rbuf = make([]byte, n)
	}
	b := c.rbuf[:n]
	if _, err := io.ReadFull(c.rw, b); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("truncated frame: %w", err), errdefs.ErrCorrupt)
	}
	return b, nil
}

// ParseOutput recognizes the payload of a ServerFrame that is exactly one
// Output (the shape WriteOutput and Write produce) and returns its stream
// and data, aliasing payload (no copy). Anything else — another message,
// unknown or repeated fields — reports false: decode it with proto.
func ParseOutput(payload []byte) (lv1.Stream, []byte, bool) {
	num, typ, n := protowire.ConsumeTag(payload)
	if n < 0 || num != outputField || typ != protowire.BytesType {
		return 0, nil, false
	}
	inner, m := protowire.ConsumeBytes(payload[n:])
	if m < 0 || n+m != len(payload) {
		return 0, nil, false
	}
	var stream uint64
	var data []byte
	seenStream, seenData := false, false
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		if n < 0 {
			return 0, nil, false
		}
		inner = inner[n:]
		switch {
		case num == streamField && typ == protowire.VarintType && !seenStream:
			v, n := protowire.ConsumeVarint(inner)
			if n < 0 || v > 1<<31-1 {
				return 0, nil, false
			}
			stream, seenStream, inner = v, true, inner[n:]
		case num == dataField && typ == protowire.BytesType && !seenData:
			v, n := protowire.ConsumeBytes(inner)
			if n < 0 {
				return 0, nil, false
			}
			data, seenData, inner = v, true, inner[n:]
		default:
			return 0, nil, false
		}
	}
	return lv1.Stream(stream), data, true
}

// OutputHeadroom is the number of spare bytes WriteOutput needs in front of
// the data.
const OutputHeadroom = 16

// Field numbers of ServerFrame.output, Output.stream and Output.data, from
// the compiled descriptors (so the fast path follows the schema).
var (
	outputField = (&lv1.ServerFrame{}).ProtoReflect().Descriptor().Fields().ByName("output").Number()
	streamField = (&lv1.Output{}).ProtoReflect().Descriptor().Fields().ByName("stream").Number()
	dataField   = (&lv1.Output{}).ProtoReflect().Descriptor().Fields().ByName("data").Number()
)

// WriteOutput sends ServerFrame{Output{stream, data}} where data is
// buf[OutputHeadroom:], without copying it: the length header and protobuf
// prefix are written into buf's headroom. Empty data sends nothing.
func (c *Conn) WriteOutput(stream lv1.Stream, buf []byte) error {
	if len(buf) < OutputHeadroom {
		return errdefs.New(errdefs.ErrInternal, "output buffer without its %d-byte headroom", OutputHeadroom)
	}
	n := len(buf) - OutputHeadroom
	if n == 0 {
		return nil
	}
	inner := protowire.SizeTag(dataField) + protowire.SizeBytes(n)
	if stream != 0 {
		inner += protowire.SizeTag(streamField) + protowire.SizeVarint(uint64(stream))
	}
	var pre [OutputHeadroom]byte
	p := protowire.AppendTag(pre[:4], outputField, protowire.BytesType)
	p = protowire.AppendVarint(p, uint64(inner))
	if stream != 0 {
		p = protowire.AppendTag(p, streamField, protowire.VarintType)
		p = protowire.AppendVarint(p, uint64(stream))
	}
	p = protowire.AppendTag(p, dataField, protowire.BytesType)
	p = protowire.AppendVarint(p, uint64(n))
	total := len(p) - 4 + n
	if len(p) > OutputHeadroom || total > MaxFrame {
		return errdefs.New(errdefs.ErrInvalid, "output frame of %d bytes exceeds %d", total, MaxFrame)
	}
	binary.BigEndian.PutUint32(p, uint32(total))
	start := OutputHeadroom - len(p)
	copy(buf[start:], p)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.send(buf[start:])
}
