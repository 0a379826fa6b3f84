package hcstandby

import (
	"errors"
	"os"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
)

func TestDecodeRefusesWhatIsNotARequest(t *testing.T) {
	good, err := Encode([]string{"--lock-fd=3"}, []string{"HOME=/h"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := Decode(good, Files); err != nil || r.Args[0] != "--lock-fd=3" || r.Env[0] != "HOME=/h" {
		t.Fatalf("a good request: %+v %v", r, err)
	}
	for _, c := range []struct {
		name  string
		b     string
		files int
		want  error
	}{
		{"not JSON", "{", Files, errdefs.ErrCorrupt},
		{"another version", `{"version":2,"args":["x"]}`, Files, errdefs.ErrRefused},
		{"no arguments", `{"version":1}`, Files, errdefs.ErrCorrupt},
		{"too few descriptors", string(good), Files - 1, errdefs.ErrCorrupt},
	} {
		if _, err := Decode([]byte(c.b), c.files); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestReceive(t *testing.T) {
	mine, theirs, err := fdpass.FilesPair()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := Encode([]string{"--lock-fd=3", "--workspace=/w"}, nil)
	if err := fdpass.SendFiles(mine, b, f, f, f, f); err != nil {
		t.Fatal(err)
	}
	req, files, err := Receive(int(theirs.Fd()), []string{"--workspace=/w"})
	if err != nil || req == nil || len(files) != Files {
		t.Fatalf("got %+v %v %v", req, files, err)
	}
	fdpass.CloseAll(files)
	// A request with too few descriptors is refused.
	if err := fdpass.SendFiles(mine, b, f); err != nil {
		t.Fatal(err)
	}
	if req, _, err := Receive(int(theirs.Fd()), nil); err == nil || req != nil {
		t.Fatalf("a request with one descriptor: %+v %v", req, err)
	}
	// A request for another Domain's start is refused.
	if err := fdpass.SendFiles(mine, b, f, f, f, f); err != nil {
		t.Fatal(err)
	}
	req, files, err = Receive(int(theirs.Fd()), []string{"--workspace=/elsewhere"})
	if !errors.Is(err, errdefs.ErrRefused) || req != nil || len(files) != Files {
		t.Fatalf("a request for another workspace: %+v %v %v (want refused, with its descriptors to report on)", req, files, err)
	}
	fdpass.CloseAll(files)
	// The CLI closed without a request: nothing to start.
	mine.Close()
	if req, files, err := Receive(int(theirs.Fd()), nil); req != nil || files != nil || err != nil {
		t.Fatalf("after the CLI closed: %+v %v %v", req, files, err)
	}
}
