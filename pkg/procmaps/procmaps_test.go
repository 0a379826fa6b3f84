package procmaps

import (
	"fmt"
	"strings"
	"testing"
)

func TestReadOnly(t *testing.T) {
	const exe = "/opt/my tools/lazaret-hc"
	maps := strings.Join([]string{
		"00400000-00c58000 r-xp 00000000 fe:01 1234 " + exe,
		"00c58000-01589000 r--p 00858000 fe:01 1234 " + exe,
		"01589000-0160f000 rw-p 01189000 fe:01 1234 " + exe, // data: a write would copy it
		"0160f000-0365c000 rw-p 00000000 00:00 0 ",          // BSS
		"7f0000000000-7f0000001000 r--s 00000000 fe:01 1234 " + exe,
		"7f0000001000-7f0000002000 ---p 00000000 fe:01 1234 " + exe, // not readable
		"7f0000002000-7f0000003000 r-xp 00000000 fe:01 99 /opt/my tools/lazaret-hc.old",
		"7f0000004000-7f0000005000 r--p 00000000 fe:01 1234 " + exe + " (deleted)",
		"7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]",
		"garbage line",
		"zz-00 r--p 0 0 0 " + exe,
		"00500000-00400000 r--p 0 0 0 " + exe, // end before start
		"",
	}, "\n")
	got := ReadOnly([]byte(maps), exe)
	want := []Mapping{{0x400000, 0xc58000}, {0xc58000, 0x1589000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read-only mappings %#v, want %#v", got, want)
	}
	// A replaced file's mappings are those of "path (deleted)"; the
	// kernel pads the inode field with spaces before the pathname.
	got = ReadOnly([]byte("08000000-08001000 r-xp 00000000 fd:01 77         /opt/my bin/x (deleted)"), "/opt/my bin/x (deleted)")
	if fmt.Sprint(got) != fmt.Sprint([]Mapping{{0x8000000, 0x8001000}}) {
		t.Fatalf("deleted path with spaces: %#v", got)
	}
	if got := ReadOnly(nil, exe); len(got) != 0 {
		t.Fatalf("empty maps: %#v", got)
	}
}
