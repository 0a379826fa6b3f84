package control

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	c := NewConn(&buf)
	in := &lv1.ClientFrame{Msg: &lv1.ClientFrame_Run{Run: &lv1.RunRequest{Argv: []string{"echo", "hi"}}}}
	if err := c.Write(in); err != nil {
		t.Fatal(err)
	}
	var out lv1.ClientFrame
	if err := c.Read(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.GetRun().GetArgv(); len(got) != 2 || got[1] != "hi" {
		t.Fatalf("got %v", got)
	}
	if err := c.Read(&out); err != io.EOF {
		t.Fatalf("want EOF at end, got %v", err)
	}
}

func TestFrameRefusals(t *testing.T) {
	cases := map[string][]byte{
		"oversized": binary.BigEndian.AppendUint32(nil, MaxFrame+1),
		"truncated": append(binary.BigEndian.AppendUint32(nil, 10), 1, 2),
		"header":    {0, 0},
		"garbage":   append(binary.BigEndian.AppendUint32(nil, 3), 0xff, 0xff, 0xff),
	}
	for name, raw := range cases {
		c := NewConn(bytes.NewBuffer(raw))
		var out lv1.ClientFrame
		if err := c.Read(&out); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("%s: want corrupt, got %v", name, err)
		}
	}
}

func FuzzFrameDecoder(f *testing.F) {
	var buf bytes.Buffer
	NewConn(&buf).Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Stdin{Stdin: &lv1.StdinData{Data: []byte("x")}}})
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := NewConn(bytes.NewBuffer(raw))
		for i := 0; i < 4; i++ {
			var out lv1.ClientFrame
			if err := c.Read(&out); err != nil {
				return
			}
		}
	})
}

// TestWriteOutputSameBytes: the copy-free output path puts exactly the bytes
// of Write on the wire, for every stream and data sizes around the varint
// boundaries, and reads back as the same frame.
func TestWriteOutputSameBytes(t *testing.T) {
	for _, stream := range []lv1.Stream{lv1.Stream_STREAM_UNSPECIFIED, lv1.Stream_STREAM_STDOUT, lv1.Stream_STREAM_TERMINAL} {
		for _, n := range []int{1, 127, 128, 16383, 16384, 64 << 10, MaxFrame - 16} {
			data := bytes.Repeat([]byte{'x'}, n)
			var want, got bytes.Buffer
			if err := NewConn(&want).Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: stream, Data: data}}}); err != nil {
				t.Fatal(err)
			}
			buf := append(make([]byte, OutputHeadroom), data...)
			c := NewConn(&got)
			if err := c.WriteOutput(stream, buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want.Bytes(), got.Bytes()) {
				t.Fatalf("stream %v, %d bytes: fast path differs from Write", stream, n)
			}
			var f lv1.ServerFrame
			if err := c.Read(&f); err != nil || f.GetOutput().GetStream() != stream || !bytes.Equal(f.GetOutput().GetData(), data) {
				t.Fatalf("stream %v, %d bytes: read back %v", stream, n, err)
			}
		}
	}
	var sink bytes.Buffer
	if err := NewConn(&sink).WriteOutput(lv1.Stream_STREAM_TERMINAL, make([]byte, OutputHeadroom+MaxFrame)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("oversized output: %v", err)
	}
	if err := NewConn(&sink).WriteOutput(lv1.Stream_STREAM_TERMINAL, make([]byte, 3)); !errors.Is(err, errdefs.ErrInternal) {
		t.Fatalf("no headroom: %v", err)
	}
}

// TestParseOutput: the copy-free decoder agrees with proto on every Output
// frame and declines everything else (which proto then decodes).
func TestParseOutput(t *testing.T) {
	enc := func(m *lv1.ServerFrame) []byte {
		var b bytes.Buffer
		if err := NewConn(&b).Write(m); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()[4:]
	}
	for _, o := range []*lv1.Output{
		{Stream: lv1.Stream_STREAM_TERMINAL, Data: []byte("hello\r\n")},
		{Stream: lv1.Stream_STREAM_STDERR, Data: bytes.Repeat([]byte{0}, 70000)},
		{Stream: lv1.Stream_STREAM_STDOUT},
		{Data: []byte("x")},
		{},
	} {
		st, data, ok := ParseOutput(enc(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: o}}))
		if !ok || st != o.Stream || !bytes.Equal(data, o.Data) {
			t.Errorf("output %v: got %v %d bytes ok=%v", o.Stream, st, len(data), ok)
		}
	}
	for _, m := range []*lv1.ServerFrame{
		{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: 7}}},
		{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: "s"}}},
		{},
	} {
		if _, _, ok := ParseOutput(enc(m)); ok {
			t.Errorf("%v taken for an Output", m)
		}
	}
	// Two Output fields (proto merges them) and trailing garbage decline.
	one := enc(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Data: []byte("a")}}})
	if _, _, ok := ParseOutput(append(append([]byte(nil), one...), one...)); ok {
		t.Error("repeated output field accepted")
	}
	if _, _, ok := ParseOutput(append(append([]byte(nil), one...), 0xff)); ok {
		t.Error("trailing bytes accepted")
	}
	if _, _, ok := ParseOutput(one[:len(one)-1]); ok {
		t.Error("truncated frame accepted")
	}
}

// pieceWriter records each Write (a stream writing one frame in pieces,
// like TLS with its 16 KiB records) and what a batcher beneath it sent.
type pieceWriter struct {
	bytes.Buffer
	held   bool
	pieces int // writes that reached the transport
	holds  int
}

func (p *pieceWriter) Write(b []byte) (int, error) {
	total := len(b)
	for len(b) > 0 { // 5-byte pieces
		n := min(5, len(b))
		p.Buffer.Write(b[:n])
		if !p.held {
			p.pieces++
		}
		b = b[n:]
	}
	return total, nil
}
func (p *pieceWriter) Hold() { p.held = true; p.holds++ }
func (p *pieceWriter) Flush() error {
	p.held = false
	p.pieces++
	return nil
}

// TestBatchedConnOneSendPerFrame: with a batcher, every frame (Write and
// WriteOutput) reaches the transport as one send, bytes unchanged.
func TestBatchedConnOneSendPerFrame(t *testing.T) {
	var plain, batched pieceWriter
	for _, w := range []*pieceWriter{&plain, &batched} {
		c := NewConn(w)
		if w == &batched {
			c = NewBatchedConn(w, w)
		}
		c.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: 7}}})
		buf := append(make([]byte, OutputHeadroom), bytes.Repeat([]byte("out"), 20)...)
		c.WriteOutput(lv1.Stream_STREAM_TERMINAL, buf)
	}
	if !bytes.Equal(plain.Bytes(), batched.Bytes()) {
		t.Fatal("batched frames differ from plain ones")
	}
	if batched.pieces != 2 || batched.holds != 2 {
		t.Fatalf("batched: %d sends for 2 frames (%d holds), want 2", batched.pieces, batched.holds)
	}
	if plain.pieces <= 2 {
		t.Fatalf("plain: %d sends: the test stream does not split frames", plain.pieces)
	}
}
