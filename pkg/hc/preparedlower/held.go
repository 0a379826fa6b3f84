package preparedlower

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
)

// heldFor bounds how long a Storage Catalog Session opened for the lease
// (OpenForLease) waits for it once open. RS asks for the lease within
// milliseconds of StartSandbox (it holds the lower already), itself about
// ten after the reuse verdict that opened the Session; meanwhile
// every other catalog operation on the host waits for
// storage-catalog.lock, so a lease that comes later (or never: the start
// failed first, or RS runs the preparer, which takes that lock itself)
// opens the catalog on its own.
var heldFor = 250 * time.Millisecond

// pendingSession is a Session being opened for the lease: done is closed
// once the open ended; sess is what it left (nil when it failed, was
// taken or was closed).
type pendingSession struct {
	done  chan struct{}
	sess  *catalog.Session
	timer *time.Timer
}

// heldState is the Service's Session for the lease (zero: none).
type heldState struct {
	mu      sync.Mutex
	pending *pendingSession
	dropped bool // the generation is being released: open none
}

// OpenForLease begins opening the Storage Catalog for this generation's
// lease once the reuse verdict names a reusable prepared lower (the one
// StartSandbox will name, and RS ask the lease of): pebble's open (it
// replays the previous operation's log into a table and writes a new
// manifest, log and options file: 2.5 ms alone, 4-12 ms on a busy start)
// then runs beside RS's start, not between RS's request and
// LeaseRecorded, on the start-up's critical path. Nothing is written to
// the catalog before the lease's own transaction, which still follows the
// durable lease intent (recordLease).
func (s *Service) OpenForLease(ctx context.Context) {
	if _, err := os.Stat(filepath.Join(s.cfg.StorageRoot, catalog.Dir)); err != nil {
		return // never written: nothing to lease from (the lease refuses)
	}
	cat, err := s.catalog()
	if err != nil {
		return
	}
	p := &pendingSession{done: make(chan struct{})}
	s.held.mu.Lock()
	if s.held.dropped || s.held.pending != nil {
		s.held.mu.Unlock()
		return
	}
	s.held.pending = p
	s.held.mu.Unlock()
	go func() {
		defer close(p.done)
		sess, err := cat.Begin(ctx)
		if err != nil {
			s.log.Debug("no Storage Catalog session for the lease: the lease opens the catalog itself", "err", err)
			return
		}
		s.held.mu.Lock()
		defer s.held.mu.Unlock()
		p.sess = sess
		if s.held.pending != p {
			return // taken or dropped meanwhile: its taker waits for done
		}
		p.timer = time.AfterFunc(heldFor, func() {
			s.held.mu.Lock()
			defer s.held.mu.Unlock()
			if s.held.pending == p && p.sess != nil {
				s.held.pending = nil
				s.closeHeld(p.sess)
				p.sess = nil
			}
		})
	}()
}

// takeHeld returns the Session opened for the lease once its open ended
// (the caller closes it), or nil when there is none or ctx ends first (the
// Session, if its open succeeds, is then closed when it does).
func (s *Service) takeHeld(ctx context.Context) *catalog.Session {
	s.held.mu.Lock()
	p := s.held.pending
	s.held.pending = nil
	s.held.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		go func() {
			<-p.done
			s.held.mu.Lock()
			sess := p.sess
			p.sess = nil
			s.held.mu.Unlock()
			if sess != nil {
				s.closeHeld(sess)
			}
		}()
		return nil
	}
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	sess := p.sess
	p.sess = nil
	return sess
}

// dropHeld closes the Session opened for the lease, if any, and opens none
// from now on: the generation's release takes the catalog's lock itself.
func (s *Service) dropHeld() {
	s.held.mu.Lock()
	s.held.dropped = true
	s.held.mu.Unlock()
	if sess := s.takeHeld(context.Background()); sess != nil {
		s.closeHeld(sess)
	}
}

func (s *Service) closeHeld(sess *catalog.Session) {
	if err := sess.Close(); err != nil {
		s.log.Warn("closing the Storage Catalog session of the lease", "err", err)
	}
}
