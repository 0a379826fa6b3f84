package hc

import (
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

func TestParseStat(t *testing.T) {
	line := "7 (we ird) name)) S 0 7 7 34816 7 4194560 1 0 0 0 3 1 0 0 20 0 1 0 1234 4644864 900 18446744073709551615"
	st, err := parseStat(line, 7)
	if err != nil || st.pgrp != 7 || st.start != 1234 {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := parseStat(line, 8); err == nil {
		t.Error("stat of another pid accepted")
	}
	if _, err := parseStat("7 (x) S 0 7", 7); err == nil {
		t.Error("short stat accepted")
	}
}

func TestPsHasGroup(t *testing.T) {
	out := []byte("UID       PID       PPID      PGID      C         TTY       STIME     TIME      CMD\n" +
		"0         1         0         1         0         ?         02:08     0s        lazaret-escalat\n" +
		"0         13        8         8         0         pts/0     02:08     20ms      sleep\n")
	if ok, err := psHasGroup(out, 8); !ok || err != nil {
		t.Errorf("group 8: %v %v", ok, err)
	}
	if ok, err := psHasGroup(out, 13); ok || err != nil {
		t.Errorf("group 13 (a pid, not a group): %v %v", ok, err)
	}
	if _, err := psHasGroup([]byte("garbage\n"), 8); err == nil {
		t.Error("output without PGID column accepted")
	}
}

func TestValidateTerminal(t *testing.T) {
	for _, r := range []*lv1.RunRequest{
		{Tty: true},
		{Tty: true, WindowSize: &lv1.WindowSize{Rows: 0, Cols: 80}},
		{Tty: true, WindowSize: &lv1.WindowSize{Rows: 24, Cols: 70000}},
		{Tty: false, WindowSize: &lv1.WindowSize{Rows: 24, Cols: 80}},
	} {
		if validateTerminal(r) == nil {
			t.Errorf("accepted %v", r)
		}
	}
	if err := validateTerminal(&lv1.RunRequest{Tty: true, WindowSize: &lv1.WindowSize{Rows: 24, Cols: 80}}); err != nil {
		t.Error(err)
	}
}
