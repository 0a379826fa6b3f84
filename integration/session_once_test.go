package integration

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/failpoint"
)

// TestClientSessionCommandRunsAtMostOnce: a CLI whose Host Coordinator is
// lost while its Client Session starts starts or joins again on its own
// (client.End.Retry) only while the command cannot have run — before the
// session's Accepted, which the coordinator sends while the exec client
// waits at its exec stop (or before the init's start request). From
// Accepted on, a lost coordinator ends the CLI with "lost the connection"
// and the command is never started a second time.
//
// Each case holds its Domain with a first session started by a CLI whose
// failpoint build arms one stage, and joins it with a second CLI whose
// session's start reaches the stage: the coordinator is SIGKILLed there.
// The joining command appends a line to count.txt in the workspace.
func TestClientSessionCommandRunsAtMostOnce(t *testing.T) {
	parallel(t)
	e := needFailpoints(t)
	const appendLine = "echo run >> /workspace/count.txt"
	for _, tc := range []struct {
		name, stage string
		tty         bool
		// retried: the stage precedes Accepted, so the CLI starts the
		// next generation and runs the command there, once.
		retried bool
	}{
		{"exec client spawned", "lazaret-hc:acquire:session_exec:spawned", false, true},
		{"exec client identified", "lazaret-hc:acquire:session_exec:identified", false, true},
		{"exec client staged", "lazaret-hc:acquire:session_exec:staged", false, false},
		{"exec client released", "lazaret-hc:acquire:session_exec:released", false, false},
		{"interactive command running", "lazaret-hc:session-running", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := workspace(t)
			recordModelTrace(t)
			env := []string{failpoint.Env + "=" + tc.stage}
			// The holder's own session, the generation's first
			// non-interactive one, is started by the init: it reaches
			// none of these stages. The joining CLI starts only once the
			// holder's command runs, so that it cannot take the init's
			// slot before the holder's session does.
			holder := e.cmdWith(e.binFP, ws, env, "run", "-p", "tiny", "--", "sh", "-c", "echo up; exec sleep 30")
			holderErr := new(syncBuffer)
			holder.Stderr = holderErr
			holderOut, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				holder.Process.Kill()
				holder.Wait()
			}()
			up := make(chan bool, 1)
			go func() {
				b := make([]byte, 3)
				_, err := io.ReadFull(holderOut, b)
				up <- err == nil && string(b) == "up\n"
				io.Copy(io.Discard, holderOut)
			}()
			select {
			case ok := <-up:
				if !ok {
					t.Fatalf("the holder's session did not start (holder stderr %q)", holderErr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("the holder's session did not start within a minute (holder stderr %q)", holderErr.String())
			}
			var code int
			var out string
			if tc.tty {
				p := startOnPTY(t, e, ws, append(env, modelTraceEnv(ws)...), filepath.Join(e.binFP, "lazaret"), "run", "-p", "tiny", "--", "sh", "-c", appendLine+"; echo appended; sleep 5")
				var b syncBuffer
				copied := make(chan struct{})
				go func() { io.Copy(&b, p.m); close(copied) }()
				done := make(chan struct{})
				go func() { p.cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(90 * time.Second):
					p.cmd.Process.Kill()
					<-done
					t.Fatalf("the joining CLI did not end; its terminal showed %q", b.String())
				}
				// The master reads what the CLI wrote until the slave's
				// last holder is gone.
				select {
				case <-copied:
				case <-time.After(10 * time.Second):
				}
				code, out = p.cmd.ProcessState.ExitCode(), b.String()
			} else {
				c := e.cmdWith(e.binFP, ws, env, "run", "-p", "tiny", "--", "sh", "-c", appendLine+"; echo appended")
				var b bytes.Buffer
				c.Stdout, c.Stderr = &b, &b
				c.Run()
				code, out = c.ProcessState.ExitCode(), b.String()
			}
			// Whatever ran in the lost generation ended with its sandbox.
			holder.Wait()
			noProcessesOrMounts(t)
			data, err := os.ReadFile(filepath.Join(ws, "count.txt"))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			runs := strings.Count(string(data), "run\n")
			if tc.retried {
				if code != 0 || !strings.Contains(out, "appended") || runs != 1 {
					t.Fatalf("a coordinator lost before Accepted: the CLI should have started again and run the command once; exit %d, output %q, ran %d times", code, out, runs)
				}
			} else {
				if code != 125 || !strings.Contains(out, "lost the connection to the Host Coordinator") {
					t.Fatalf("a coordinator lost after Accepted: the CLI should end with the lost connection (125); exit %d, output %q, the command ran %d times", code, out, runs)
				}
				// What became of the Domain, and where to look (checked
				// below: the next run recovers it).
				if !strings.Contains(out, "the next `lazaret run` here recovers the Domain") || !strings.Contains(out, "`lazaret logs -p tiny`") {
					t.Fatalf("the lost coordinator's message should say the next run recovers the Domain and name `lazaret logs -p tiny`: %q", out)
				}
				if runs > 1 {
					t.Fatalf("the command ran %d times", runs)
				}
			}
			// The joining session went through the stage (not through the
			// init's slot, which the holder's session holds).
			if b, _ := os.ReadFile(filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")), "hc.log")); !strings.Contains(string(b), "failpoint hit: "+tc.stage) {
				t.Fatalf("stage %s was never reached (exit %d, output %q)", tc.stage, code, out)
			}
			t.Logf("stage %s: exit %d, the command ran %d time(s)", tc.stage, code, runs)
			r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "recovered")
			if r.code != 0 || r.stdout != "recovered\n" {
				t.Fatalf("run after the lost coordinator: %+v", r)
			}
			noLeftovers(t)
			allClean(t, ws, "tiny")
		})
	}
}
