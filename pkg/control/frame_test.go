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
