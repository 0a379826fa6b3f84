// Package modeltrace records the protocol steps a Lazaret process takes, in
// the vocabulary of the TLA+ models (tla/Lazaret.tla, and
// tla/PreparedLower.tla for the prepared lower, its leases and State
// Anchor mounts; the event kinds are those of pkg/model/trace), so that a
// real run can be replayed through each model's Next relation.
//
// The switch is the environment variable Env naming a trace file. The CLI
// passes it to the Host Coordinator it starts, and the Host Coordinator to
// the Runtime Supervisor, exactly as the start-up timing trace's file is
// passed (package timing). With the variable unset, nothing is opened and
// every Emit is one atomic pointer load.
//
// # Records and their order
//
// Each record is one JSON line: the model action and its parameters as
// product identifiers (Domain ID, Client Session key, Escalation Request
// ID), the recording role (cli, hc, rs), the process id, the Domain
// generation and a per-process sequence number. Every process appends to
// the same file through an O_APPEND descriptor with one write(2) per
// record, so records never interleave and the file's line order is the
// order in which the appends took effect.
//
// That order is the trace's linearisation, and it is causally sound
// because every emission is made synchronously, before the step's effect
// becomes visible to any other process or goroutine: before the protocol
// message that announces it is sent (StartSandbox before SandboxReady,
// StartSidecar before the ownership acknowledgement), and, for steps whose
// model guard reads state shared between goroutines of the Host
// Coordinator (the generation's phase, its session set), while the lock
// that serialises that state is held. So if step a happens-before step b
// (through a message, a pipe, a process exit or a lock), a's append
// completes before b's starts and a precedes b in the file; steps with no
// happens-before edge between them are concurrent and commute in the model
// (their guards and effects touch variables only they own), so any order
// the file gives them is a valid linearisation. A PreparedLower step that
// changes the Storage Catalog (a preparation, a lease, a reclamation) is
// recorded inside the catalog transaction, under storage-catalog.lock,
// which orders it with every other process's catalog steps.
package modeltrace

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// Env names the trace file (created by whoever asks for the trace; each
// process appends to it).
const Env = "LAZARET_MODEL_TRACE"

// EnvSession names, to the Host Coordinator a CLI starts, that CLI's
// Client Session key: the session on whose behalf the generation starts
// (the model's StartNewDomain(s)).
const EnvSession = "LAZARET_MODEL_TRACE_SESSION"

// Version is the record format version; a reader refuses a newer one.
const Version = 1

// Record is one trace line.
type Record struct {
	V          int      `json:"v"`
	Seq        uint64   `json:"seq"`
	Model      string   `json:"model"`
	Action     string   `json:"action"`
	Args       []string `json:"args,omitempty"`
	Role       string   `json:"role"`
	PID        int      `json:"pid"`
	Domain     string   `json:"domain"`
	Generation uint64   `json:"generation"`
	// Facts carry the configuration constants the run instantiates for
	// a parameter (the session a request belongs to, the approved
	// command's digest), which the replayer turns into the model's
	// CONSTANTS.
	Facts map[string]string `json:"facts,omitempty"`
	// Reconcile marks a recovery step that may find its work already done
	// (a resource a lease-loss teardown already stopped): the replayer
	// accepts it as a stuttering step when the model state already has
	// the values it would assign.
	Reconcile bool `json:"reconcile,omitempty"`
}

// recorder appends one process's records to the trace file.
type recorder struct {
	mu   sync.Mutex
	f    *os.File
	path string
	role string
	pid  int
	seq  uint64
}

var active atomic.Pointer[recorder]

// Start turns recording on for this process as role ("cli", "hc", "rs")
// when getenv names a trace file; it is a no-op otherwise. A file that
// cannot be opened leaves recording off and is reported.
func Start(role string, getenv func(string) string) error {
	p := getenv(Env)
	if p == "" {
		return nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open the model trace %s: %w", p, err)
	}
	active.Store(&recorder{f: f, path: p, role: role, pid: os.Getpid()})
	return nil
}

// On reports whether this process records.
func On() bool { return active.Load() != nil }

// Environ is what a recording process passes to a child so that it
// records into the same file (nothing when recording is off).
func Environ() []string {
	r := active.Load()
	if r == nil {
		return nil
	}
	return []string{Env + "=" + r.path}
}

// SessionKey is the trace's name for the Client Session of the CLI with
// process id pid: the Host Coordinator learns it from the control
// connection's peer credentials, the CLI from its own pid.
func SessionKey(pid int) string { return "cli-" + strconv.Itoa(pid) }

// Emit records one step of the Lazaret model: action with its parameters
// (product identifiers), for Domain domain's generation gen.
func Emit(domain string, gen uint64, action string, args ...string) {
	if r := active.Load(); r != nil {
		r.write(Record{Model: "Lazaret", Action: action, Args: args, Domain: domain, Generation: gen})
	}
}

// EmitFacts is Emit with configuration facts (see Record.Facts).
func EmitFacts(domain string, gen uint64, facts map[string]string, action string, args ...string) {
	if r := active.Load(); r != nil {
		r.write(Record{Model: "Lazaret", Action: action, Args: args, Domain: domain, Generation: gen, Facts: facts})
	}
}

// EmitReconcile records a recovery step that may find its work done.
func EmitReconcile(domain string, gen uint64, action string, args ...string) {
	if r := active.Load(); r != nil {
		r.write(Record{Model: "Lazaret", Action: action, Args: args, Domain: domain, Generation: gen, Reconcile: true})
	}
}

func (r *recorder) write(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.V, rec.Seq, rec.Role, rec.PID = Version, r.seq, r.role, r.pid
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	// One write(2) on an O_APPEND descriptor: the line lands whole, after
	// every line whose write returned before this one started.
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "lazaret: model trace %s: %v\n", r.path, err)
	}
}

// The PreparedLower model (tla/PreparedLower.tla). Its records carry
// Model PreparedLower. A generation step names its generation by the
// record's Domain and Generation (the single argument is GenerationKey, the
// vocabulary's Generation parameter) and, where the recorder knows it, the
// prepared artifact the generation leases in the fact FactArtifact. An
// artifact step's argument is the prepared-artifact ID; when a generation's
// process takes it (preparation by the Runtime Supervisor) the record
// names that generation too, whose demand the preparation serves.
const (
	// PreparedLower is the Model of the records below.
	PreparedLower = "PreparedLower"
	// FactArtifact names the prepared artifact of a generation step.
	FactArtifact = "artifact"
)

// GenerationKey is the trace's name for Domain domain's generation gen.
func GenerationKey(domain string, gen uint64) string {
	return domain + "/" + strconv.FormatUint(gen, 10)
}

// EmitGeneration records PreparedLower step action of Domain domain's
// generation gen; artifact is the prepared artifact the generation leases
// ("" when the recorder does not know it yet).
func EmitGeneration(domain string, gen uint64, artifact, action string) {
	if r := active.Load(); r != nil {
		r.write(plGeneration(domain, gen, artifact, action, false))
	}
}

// EmitGenerationReconcile is EmitGeneration for a recovery step that may
// find its work already done (see Record.Reconcile).
func EmitGenerationReconcile(domain string, gen uint64, artifact, action string) {
	if r := active.Load(); r != nil {
		r.write(plGeneration(domain, gen, artifact, action, true))
	}
}

func plGeneration(domain string, gen uint64, artifact, action string, reconcile bool) Record {
	rec := Record{Model: PreparedLower, Action: action, Args: []string{GenerationKey(domain, gen)}, Domain: domain, Generation: gen, Reconcile: reconcile}
	if artifact != "" {
		rec.Facts = map[string]string{FactArtifact: artifact}
	}
	return rec
}

// EmitArtifact records PreparedLower step action of prepared artifact
// artifact, taken for Domain domain's generation gen ("" and 0 when no
// generation's process takes it: `lazaret gc`).
func EmitArtifact(domain string, gen uint64, action, artifact string) {
	if r := active.Load(); r != nil {
		r.write(Record{Model: PreparedLower, Action: action, Args: []string{artifact}, Domain: domain, Generation: gen})
	}
}
