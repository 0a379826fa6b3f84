package hostcheck

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
)

func vfsCap(magic uint32, words ...uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, magic)
	for _, w := range words {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

func TestParseFileCaps(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want uint64
		bad  bool
	}{
		// getcap: cap_setuid=ep, as Fedora ships newuidmap.
		{"v2 setuid", vfsCap(0x02000001, 1<<capSetuid, 0, 0, 0), 1 << capSetuid, false},
		{"v2 high word", vfsCap(0x02000000, 0, 0, 1, 0), 1 << 32, false},
		{"v1", vfsCap(0x01000001, 1<<capSetgid, 0), 1 << capSetgid, false},
		{"v3 root 0", vfsCap(0x03000001, 1<<capSetuid, 0, 0, 0, 0), 1 << capSetuid, false},
		{"v3 other root", vfsCap(0x03000001, 1<<capSetuid, 0, 0, 0, 100000), 0, false},
		{"short", []byte{1, 2}, 0, true},
		{"short v2", vfsCap(0x02000001, 1), 0, true},
		{"unknown revision", vfsCap(0x09000000, 0, 0, 0, 0), 0, true},
	} {
		got, err := parseFileCaps(c.b)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("%s: %#x %v", c.name, got, err)
		}
	}
}

// TestIDMapToolsFileCapabilities: a 0755 newuidmap/newgidmap with
// cap_setuid / cap_setgid (Fedora) passes; the wrong capability does not.
func TestIDMapToolsFileCapabilities(t *testing.T) {
	h := good()
	h.Stat = func(string) (os.FileInfo, error) { return fakeInfo{mode: 0o755}, nil }
	h.FileCaps = func(p string) (uint64, error) {
		if strings.HasSuffix(p, "newuidmap") {
			return 1 << capSetuid, nil
		}
		return 1 << capSetgid, nil
	}
	if _, _, err := h.IDMapTools(); err != nil {
		t.Fatalf("file capabilities refused: %v", err)
	}
	h.FileCaps = func(string) (uint64, error) { return 1 << capSetgid, nil }
	if _, _, err := h.IDMapTools(); err == nil || !strings.Contains(err.Error(), "/usr/bin/newuidmap is neither setuid root nor granted cap_setuid") {
		t.Fatalf("newuidmap without cap_setuid: %v", err)
	}
	h.FileCaps = func(string) (uint64, error) { return 0, errors.New("EOPNOTSUPP") }
	if _, _, err := h.IDMapTools(); err == nil {
		t.Fatal("unreadable capabilities accepted")
	}
}

// TestRealFileCaps: a file without the attribute has none (ENODATA is
// not an error).
func TestRealFileCaps(t *testing.T) {
	caps, err := realFileCaps(os.Args[0])
	if err != nil || caps != 0 {
		t.Fatalf("test binary has file capabilities %#x (%v)", caps, err)
	}
}
