package runverb

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/secretenv"
)

// secretCommandTimeout bounds a secret command (it may prompt for a
// passphrase at the terminal).
const secretCommandTimeout = 2 * time.Minute

// resolveCredentials resolves the profile's env_pass and secrets on the
// host before anything starts; a secret command runs as the developer, with
// the CLI's stdin and stderr (for prompts such as a pass passphrase) and
// the CLI's environment.
func resolveCredentials(broker *proc.Broker, p *config.Profile) (map[string]string, error) {
	if len(p.EnvPass) == 0 && len(p.Secrets) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), secretCommandTimeout)
	defer cancel()
	return secretenv.Resolve(ctx, p, os.LookupEnv, func(ctx context.Context, argv []string, limit int64) ([]byte, error) {
		path, err := exec.LookPath(argv[0])
		if err != nil {
			return nil, fmt.Errorf("%s not found in PATH", argv[0])
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		child, err := broker.Start("secret_command", proc.Command{Path: path, Args: argv, Env: os.Environ(), Dir: "/", Files: []*os.File{os.Stdin, w, os.Stderr}})
		w.Close()
		if err != nil {
			return nil, err
		}
		done := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(io.LimitReader(r, limit))
			io.Copy(io.Discard, r)
			done <- b
		}()
		st, err := child.Wait(ctx)
		if err != nil {
			child.Signal(unix.SIGKILL) // the exact child, through its pidfd
			<-child.Done()
			return nil, fmt.Errorf("no answer within %s", secretCommandTimeout)
		}
		out := <-done
		if !st.Exited || st.Code != 0 {
			return nil, fmt.Errorf("%s", st)
		}
		return out, nil
	})
}
