// Package escalate is the in-sandbox Escalation Client (lazaret-escalate,
// spec §3.7): it signs an Escalation Request with the Agent Sandbox's
// request-signing key, binds it to the caller's Client Session with the
// Session Request Capability (LAZARET_SESSION_CAPABILITY), writes it into the
// Escalation Mailbox by atomic rename, then streams the coordinator-signed
// result chunks to its stdout/stderr, acknowledging each contiguous
// sequence with a sandbox signature, and exits with the host command's
// status. SIGINT/SIGTERM send a signed cancellation. It links nothing
// host-side (cmd/lazaret-escalate's dependency test enforces it).
package escalate

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Exit statuses other than the host command's own.
const (
	// ExitUsage: bad arguments (EX_USAGE).
	ExitUsage = 64
	// ExitUnavailable: not inside a Lazaret session, or no mailbox
	// (EX_UNAVAILABLE).
	ExitUnavailable = 69
	// ExitFailed: the request failed on the host (refused, could not
	// start the program, session ended) (EX_SOFTWARE).
	ExitFailed = 70
	// ExitDenied: the developer (or the absence of a terminal) denied it
	// (EX_NOPERM).
	ExitDenied = 77
	// ExitTimedOut: no decision in time, or the result was not
	// acknowledged in time.
	ExitTimedOut = 124
	// ExitCancelled: cancelled by this client (SIGINT/SIGTERM).
	ExitCancelled = 130
)

// Fixed file names of the mailbox protocol.
const (
	RequestSuffix = ".req"
	CancelSuffix  = ".cancel"
	AckSuffix     = ".ack"
	ResultName    = "result"
	ChunkSuffix   = ".chunk"
)

// ChunkName is the file name of result chunk seq in a request's result
// directory.
func ChunkName(seq uint64) string { return strconv.FormatUint(seq, 10) + ChunkSuffix }

// KeepaliveInterval is how often the client re-acknowledges while it
// waits; the coordinator's acknowledgement timeout is several of these.
const KeepaliveInterval = time.Second

const usage = `usage: lazaret-escalate [--why TEXT] [--timeout DURATION] -- PROGRAM [ARG...]

Asks the developer to run PROGRAM with exactly these arguments on the host,
in the host directory of the current /workspace directory. The host
command's output streams here; the exit status is the host command's.
Other statuses: 77 denied, 124 timed out, 130 cancelled, 70 failed,
69 escalation unavailable, 64 usage.`

// Options locate the client's inputs (tests point them elsewhere).
type Options struct {
	Env            func(string) string
	CredentialsDir string
	RequestsDir    string
	ResultsDir     string
	WorkspaceDir   string
	Getwd          func() (string, error)
	Stdout, Stderr io.Writer
	Poll           time.Duration
	// Signals delivers SIGINT/SIGTERM (nil: the process's own).
	Signals <-chan os.Signal
	// Timing, when set, receives one line of the client's own
	// measurements (TimingEnv; the benchmark's protocol round trip).
	Timing io.Writer
}

// TimingEnv, when set to 1 in the client's environment, makes it print one
// line to stderr after the result: "lazaret-escalate: timing
// setup_us=… sign_us=… put_us=… roundtrip_us=…", where roundtrip is from
// building the request to holding the verified terminal result (what the
// spec's round-trip target is judged on; process start is not in it).
const TimingEnv = "LAZARET_ESCALATE_TIMING"

// mainStart is when the client's main began (after the Go runtime and
// package initialisation).
var mainStart time.Time

// Main runs the client and returns its exit status.
func Main(args []string, stderr io.Writer) int {
	mainStart = time.Now()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var timing io.Writer
	if os.Getenv(TimingEnv) == "1" {
		timing = stderr
	}
	var stdout io.Writer = os.Stdout
	errf, _ := stderr.(*os.File)
	if isTerminal(os.Stdout) || (errf != nil && isTerminal(errf)) {
		// The session's terminal is not read while the host command runs
		// (see spool): hold its output here instead of blocking on it.
		sp := newSpool()
		defer sp.Drain()
		stdout, stderr = sp.writer(os.Stdout), sp.writer(stderr)
		if timing != nil {
			timing = stderr
		}
	}
	return Run(args, Options{Timing: timing,
		Env: os.Getenv, CredentialsDir: ocispec.CredentialsDir, RequestsDir: ocispec.MailboxRequestsDir,
		ResultsDir: ocispec.MailboxResultsDir, WorkspaceDir: ocispec.WorkspaceDir, Getwd: os.Getwd,
		Stdout: stdout, Stderr: stderr, Poll: 2 * time.Millisecond, Signals: sigs,
	})
}

type request struct {
	why     string
	timeout time.Duration
	argv    []string
}

func parseArgs(args []string) (*request, error) {
	r := &request{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, error) {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
				return v, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		switch {
		case a == "--":
			r.argv = args[i+1:]
			if len(r.argv) == 0 {
				return nil, errors.New("no PROGRAM after --")
			}
			return r, record.CheckArgv(r.argv)
		case a == "--why" || strings.HasPrefix(a, "--why="):
			v, err := val()
			if err != nil {
				return nil, err
			}
			r.why = v
		case a == "--timeout" || strings.HasPrefix(a, "--timeout="):
			v, err := val()
			if err != nil {
				return nil, err
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("--timeout %q: give a positive duration such as 90s or 5m", v)
			}
			r.timeout = d
		default:
			return nil, fmt.Errorf("unexpected argument %q: put the host command after --", a)
		}
	}
	return nil, errors.New("missing -- PROGRAM [ARG...]")
}

// Run is Main with injected inputs.
func Run(args []string, o Options) int {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" {
			fmt.Fprintln(o.Stderr, usage)
			return 0
		}
	}
	r, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(o.Stderr, "lazaret-escalate: %v\n\n%s\n", err, usage)
		return ExitUsage
	}
	c, code := setup(o)
	if c == nil {
		return code
	}
	c.tSetup = time.Now()
	return c.run(r)
}

type client struct {
	o        Options
	key      ed25519.PrivateKey
	coordPub ed25519.PublicKey
	capBytes []byte
	claims   trust.CapabilityClaims
	cwd      string
	// Timing marks (Options.Timing).
	tSetup, tBuild, tSigned, tPut time.Time
	polls                         int
}

// timing prints the client's measurements (Options.Timing).
func (c *client) timing() {
	if c.o.Timing == nil {
		return
	}
	us := func(a, b time.Time) int64 { return b.Sub(a).Microseconds() }
	now := time.Now()
	start := c.tBuild
	if !mainStart.IsZero() {
		start = mainStart
	}
	fmt.Fprintf(c.o.Timing, "lazaret-escalate: timing put_unix_ns=%d setup_us=%d sign_us=%d put_us=%d wait_us=%d polls=%d roundtrip_us=%d\n",
		c.tPut.UnixNano(), us(start, c.tSetup), us(c.tBuild, c.tSigned), us(c.tSigned, c.tPut), us(c.tPut, now), c.polls, us(c.tBuild, now))
}

func fail(o Options, code int, format string, a ...any) (*client, int) {
	fmt.Fprintf(o.Stderr, "lazaret-escalate: "+format+"\n", a...)
	return nil, code
}

func setup(o Options) (*client, int) {
	c := &client{o: o}
	capB64 := o.Env("LAZARET_SESSION_CAPABILITY")
	if capB64 == "" {
		return fail(o, ExitUnavailable, "not inside a Lazaret session (LAZARET_SESSION_CAPABILITY is not set); run it from a command started by `lazaret run`")
	}
	var err error
	if c.capBytes, err = base64.StdEncoding.DecodeString(capB64); err != nil {
		return fail(o, ExitUnavailable, "LAZARET_SESSION_CAPABILITY is not base64: %v", err)
	}
	capRec, err := trust.DecodeSigned(c.capBytes)
	if err == nil {
		err = json.Unmarshal(capRec.Payload, &c.claims)
	}
	if err != nil {
		return fail(o, ExitUnavailable, "LAZARET_SESSION_CAPABILITY is not a session capability: %v", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(o.CredentialsDir, trust.SandboxKeyFile))
	if err != nil {
		return fail(o, ExitUnavailable, "read the sandbox request-signing key: %v", err)
	}
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		return fail(o, ExitUnavailable, "the sandbox request-signing key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	key, ok := k.(ed25519.PrivateKey)
	if err != nil || !ok {
		return fail(o, ExitUnavailable, "the sandbox request-signing key is not an Ed25519 PKCS#8 key")
	}
	c.key = key
	credB, err := os.ReadFile(filepath.Join(o.CredentialsDir, "coordinator.cred"))
	if err != nil {
		return fail(o, ExitUnavailable, "read the coordinator credential: %v", err)
	}
	cred, err := trust.DecodeSigned(credB)
	var cc trust.CredentialClaims
	if err == nil {
		err = json.Unmarshal(cred.Payload, &cc)
	}
	if err != nil || len(cc.PublicKey) != ed25519.PublicKeySize {
		return fail(o, ExitUnavailable, "the coordinator credential is unreadable: %v", err)
	}
	c.coordPub = cc.PublicKey
	wd, err := o.Getwd()
	if err != nil {
		return fail(o, ExitUsage, "current directory: %v", err)
	}
	rel, err := filepath.Rel(o.WorkspaceDir, wd)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
		return fail(o, ExitUsage, "the current directory %s is outside %s: host commands run in the workspace; cd into it first", wd, o.WorkspaceDir)
	}
	if rel == "." {
		rel = ""
	}
	c.cwd = rel
	return c, 0
}

func (c *client) sign(k record.Kind, m proto.Message) ([]byte, error) {
	return record.Seal(k, m, record.KeySigner(c.key))
}

// put writes a record into the request directory by atomic rename.
func (c *client) put(name string, b []byte) error {
	tmp := filepath.Join(c.o.RequestsDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(c.o.RequestsDir, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (c *client) run(r *request) int {
	c.tBuild = time.Now()
	id, err := trust.NewID(nil)
	if err != nil {
		_, code := fail(c.o, ExitFailed, "%v", err)
		return code
	}
	gen := c.claims.Identity.Generation
	req := &lv1.EscalationRequest{
		RequestId: id, DomainId: c.claims.Identity.DomainID, Generation: gen,
		SessionCapability: c.capBytes, Argv: r.argv, Cwd: c.cwd, Justification: r.why,
		DecisionTimeoutSeconds: uint32((r.timeout + time.Second - 1) / time.Second),
	}
	b, err := c.sign(record.KindRequest, req)
	if err != nil {
		_, code := fail(c.o, ExitUsage, "%v", err)
		return code
	}
	c.tSigned = time.Now()
	if err := c.put(id+RequestSuffix, b); err != nil {
		_, code := fail(c.o, ExitUnavailable, "write the request into the escalation mailbox: %v", err)
		return code
	}
	c.tPut = time.Now()
	resDir := filepath.Join(c.o.ResultsDir, id)
	var next uint64 = 1 // next chunk sequence
	var acked uint64    // written by this goroutine only
	cancelled := false
	var cancelAt time.Time
	var mu sync.Mutex // serializes ack files (this loop and the keep-alive)
	acks := 0
	send := func(seq uint64, final bool) {
		b, err := c.sign(record.KindAck, &lv1.EscalationAck{RequestId: id, Generation: gen, Sequence: seq, Final: final})
		if err == nil {
			// A fresh name per ack: the coordinator unlinks the name it
			// read, which must not be a newer ack renamed over it.
			mu.Lock()
			acks++
			n := acks
			mu.Unlock()
			c.put(id+"."+strconv.Itoa(n)+AckSuffix, b)
		}
	}
	var ackedShared atomic.Uint64
	ack := func(seq uint64, final bool) {
		send(seq, final)
		acked = seq
		ackedShared.Store(seq)
	}
	// Keep-alive from its own goroutine: a client blocked writing to a slow
	// reader still proves it is alive; only a client that is gone stops it
	// (the coordinator's acknowledgement timeout then cancels the request).
	stopKeepalive := make(chan struct{})
	defer close(stopKeepalive)
	go func() {
		t := time.NewTicker(KeepaliveInterval)
		defer t.Stop()
		for {
			select {
			case <-stopKeepalive:
				return
			case <-t.C:
				send(ackedShared.Load(), false)
			}
		}
	}()
	for {
		select {
		case <-c.o.Signals:
			if !cancelled {
				cancelled, cancelAt = true, time.Now()
				if b, err := c.sign(record.KindCancellation, &lv1.EscalationCancellation{RequestId: id, Generation: gen}); err == nil {
					c.put(id+CancelSuffix, b)
				}
			}
		default:
		}
		progressed := false
		// The next chunk, if present.
		if b, err := os.ReadFile(filepath.Join(resDir, ChunkName(next))); err == nil {
			var ch lv1.ResultChunk
			if err := c.open(b, record.KindChunk, &ch); err != nil || ch.RequestId != id || ch.Generation != gen || ch.Sequence != next || len(ch.Data) > record.MaxChunkData {
				_, code := fail(c.o, ExitFailed, "refused result chunk %d: %v", next, err)
				return code
			}
			w := c.o.Stdout
			if ch.Stream == lv1.EscalationStream_ESCALATION_STREAM_STDERR {
				w = c.o.Stderr
			}
			w.Write(ch.Data)
			// Acknowledge every half window, or when caught up (below), so
			// the coordinator never stalls at record.MaxUnacked.
			if next-acked >= record.MaxUnacked/2 {
				ack(next, false)
			}
			next++
			progressed = true
		} else if b, err := os.ReadFile(filepath.Join(resDir, ResultName)); err == nil {
			var res lv1.EscalationResult
			if err := c.open(b, record.KindResult, &res); err != nil || res.RequestId != id || res.Generation != gen {
				_, code := fail(c.o, ExitFailed, "refused escalation result: %v", err)
				return code
			}
			if res.LastSequence < next { // every chunk was delivered
				c.timing()
				ack(res.LastSequence, true)
				return c.finish(&res)
			}
		}
		if cancelled && time.Since(cancelAt) > 30*time.Second {
			_, code := fail(c.o, ExitCancelled, "cancelled; the coordinator did not confirm")
			return code
		}
		if !progressed && acked < next-1 {
			ack(next-1, false) // caught up: acknowledge what was written
		}
		if !progressed {
			c.polls++
			time.Sleep(c.o.Poll)
		}
	}
}

func (c *client) open(b []byte, k record.Kind, m proto.Message) error {
	return record.Open(b, k, c.coordPub, m)
}

func (c *client) finish(res *lv1.EscalationResult) int {
	why := record.EscapeText(res.Reason)
	switch res.Outcome {
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED:
		if res.Signal != 0 {
			return 128 + int(res.Signal)
		}
		return int(res.ExitCode)
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED:
		fmt.Fprintf(c.o.Stderr, "lazaret-escalate: denied: %s\n", why)
		return ExitDenied
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT:
		fmt.Fprintf(c.o.Stderr, "lazaret-escalate: timed out: %s\n", why)
		return ExitTimedOut
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED:
		fmt.Fprintf(c.o.Stderr, "lazaret-escalate: cancelled: %s\n", why)
		return ExitCancelled
	}
	fmt.Fprintf(c.o.Stderr, "lazaret-escalate: failed: %s\n", why)
	return ExitFailed
}
