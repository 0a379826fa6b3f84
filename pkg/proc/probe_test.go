package proc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestPidfsHostSupportProbe(t *testing.T) {
	b := testBroker(t)
	rep, err := b.PidfsHostSupportProbe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != ProbeVersion || len(rep.Observations) != 5 {
		t.Fatalf("report %+v", rep)
	}
}

// TestKernelQualificationSuite runs the suite `lazaret kernel qualify`
// runs (QualificationSuite), so a kernel that regresses is noticed by the
// unit tests too.
func TestKernelQualificationSuite(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	var lines []string
	if err := testBroker(t).QualificationSuite(context.Background(), func(l string) { lines = append(lines, l) }); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	out := strings.Join(lines, "\n")
	for _, want := range []string{"support probe " + ProbeVersion + ": passed", fmt.Sprintf("repeated %d times: passed", QualifyProbes),
		fmt.Sprintf("%d consecutive processes", QualifyProcesses), "wrapper barrier: passed", "exec-stop barrier: passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("suite output lacks %q:\n%s", want, out)
		}
	}
	fmt.Fprintln(os.Stdout, out)
}
