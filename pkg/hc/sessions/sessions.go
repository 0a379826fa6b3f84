package sessions

import (
	"log/slog"
	"sync"
	"time"
)

// Clock is the registry's time source (a fake one in tests).
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine after d, unless stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

// Config names what the registry needs from the coordinator.
type Config struct {
	Log *slog.Logger
	// Clock is the time source; nil means the system clock.
	Clock Clock
	// LingerExpired is run by the linger timer, without the coordinator's
	// lock: it takes the lock and, if LingerEnded, requests the teardown.
	LingerExpired func()
}

// Registry holds the Client Sessions of one generation; S is the
// coordinator's session type.
type Registry[S any] struct {
	log           *slog.Logger
	clock         Clock
	lingerExpired func()

	sessions map[string]S
	wg       sync.WaitGroup // admitted sessions still writing to their clients
	active   int            // registered or waiting sessions
	everHad  bool
	// stopRequested: `lazaret stop` is ending the sessions; no session is
	// admitted any more.
	stopRequested bool
	// linger is the longest time any session of this generation asked the
	// Domain to stay up after its last session leaves; while it lingers,
	// lingerTimer ends it at lingerUntil unless a session joins.
	linger      time.Duration
	lingerTimer Timer
	lingerUntil time.Time
}

// New returns an empty registry.
func New[S any](cfg Config) *Registry[S] {
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry[S]{log: log, clock: clock, lingerExpired: cfg.LingerExpired, sessions: map[string]S{}}
}

// StopRequested reports whether `lazaret stop` is ending the sessions;
// the coordinator refuses a new session then (the CLI retries).
func (r *Registry[S]) StopRequested() bool { return r.stopRequested }

// Admit adds an admitted session: it counts as active from now until
// Leave, cancels a linger in progress and raises the generation's linger
// to the session's. The caller checked StopRequested and its state, and
// calls Done once the session wrote its last frame.
func (r *Registry[S]) Admit(id string, s S, linger time.Duration) {
	r.active++
	r.everHad = true
	if linger > r.linger {
		r.linger = linger
	}
	r.endLinger()
	r.sessions[id] = s
	r.wg.Add(1)
}

// Leave removes a session. It returns true when the generation must be
// torn down: the last session left and the Domain does not linger. With
// a linger, running and no stop requested, the last leave starts the
// linger timer instead.
func (r *Registry[S]) Leave(id string, running bool) (teardown bool) {
	delete(r.sessions, id)
	r.active--
	if r.active != 0 {
		return false
	}
	if r.linger > 0 && running && !r.stopRequested {
		r.lingerUntil = r.clock.Now().Add(r.linger)
		r.lingerTimer = r.clock.AfterFunc(r.linger, r.lingerExpired)
		r.log.Info("last session left: the Domain lingers", "linger", r.linger.String())
		return false
	}
	r.log.Info("last session left")
	return true
}

// Done marks an admitted session as finished writing to its client.
func (r *Registry[S]) Done() { r.wg.Done() }

// Drained is closed once every admitted session called Done.
func (r *Registry[S]) Drained() <-chan struct{} {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	return done
}

// LingerEnded ends a linger no session interrupted: true (the Domain
// stops as after its last session) when the linger's time has come and
// no session joined meanwhile.
func (r *Registry[S]) LingerEnded() bool {
	if r.active != 0 || r.lingerUntil.IsZero() || r.clock.Now().Before(r.lingerUntil) {
		return false
	}
	r.log.Info("linger ended with no session", "linger", r.linger.String())
	r.lingerTimer, r.lingerUntil = nil, time.Time{}
	return true
}

// Linger is the longest linger any session of the generation asked for.
func (r *Registry[S]) Linger() time.Duration { return r.linger }

// LingerLeft reports whether the Domain lingers and how long it still
// does (zero once the time has come).
func (r *Registry[S]) LingerLeft() (left time.Duration, lingering bool) {
	if r.lingerUntil.IsZero() {
		return 0, false
	}
	return max(r.lingerUntil.Sub(r.clock.Now()), 0), true
}

func (r *Registry[S]) endLinger() {
	if r.lingerTimer != nil {
		r.lingerTimer.Stop()
		r.log.Info("a session joined the lingering Domain", "left", r.lingerUntil.Sub(r.clock.Now()).Round(time.Second).String())
	}
	r.lingerTimer, r.lingerUntil = nil, time.Time{}
}

// Idle reports whether no session was ever admitted and none is active
// (the starting CLI died before connecting).
func (r *Registry[S]) Idle() bool { return !r.everHad && r.active == 0 }

// Get returns an admitted session that has not left.
func (r *Registry[S]) Get(id string) (S, bool) {
	s, ok := r.sessions[id]
	return s, ok
}

// IDs returns the IDs of the sessions that have not left, in no order.
func (r *Registry[S]) IDs() []string {
	ids := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		ids = append(ids, id)
	}
	return ids
}

// All returns the sessions that have not left, in no order.
func (r *Registry[S]) All() []S {
	all := make([]S, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	return all
}

// Stop is `lazaret stop`: from now on no session is admitted. It returns
// every session that has not left (the coordinator ends each as if its
// client had gone), whether this is the first stop request, and whether
// the generation must be torn down at once (it is not running or has no
// session, so no last leave will).
func (r *Registry[S]) Stop(running bool) (ending []S, first, teardown bool) {
	first = !r.stopRequested
	r.stopRequested = true
	return r.All(), first, !running || r.active == 0
}
