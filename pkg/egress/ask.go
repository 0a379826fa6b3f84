package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Decision is the developer's answer to an ask (its wire word).
type Decision string

const (
	AllowOnce   Decision = "once"   // this request (and those waiting on the same ask)
	AllowDomain Decision = "domain" // host:port for the proxy's lifetime (one Domain generation)
	Deny        Decision = "deny"
)

func (d Decision) valid() bool { return d == AllowOnce || d == AllowDomain || d == Deny }

// AskRequest is a request outside the allowlist to put to the developer.
type AskRequest struct {
	Session string // the session label, "s-<session id>"
	Host    string
	Port    uint16
	Via     string // "connect", "http" or "socks"
}

// DefaultAskTimeout is how long an ask waits for the developer before it
// counts as Deny.
const DefaultAskTimeout = 5 * time.Minute

// asker puts requests to the developer: one pending ask per host:port,
// shared by every request waiting for it, and AllowDomain answers
// remembered.
type asker struct {
	ask     func(context.Context, AskRequest) (Decision, error)
	timeout time.Duration
	mu      sync.Mutex
	allowed map[string]bool
	pending map[string]*pendingAsk
}

type pendingAsk struct {
	done chan struct{}
	d    Decision
	err  error
}

func hostPort(host string, port uint16) string { return host + ":" + strconv.Itoa(int(port)) }

// remembered reports whether host:port was allowed for the Domain's
// lifetime.
func (a *asker) remembered(host string, port uint16) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allowed[hostPort(host, port)]
}

// decide asks (or joins the pending ask for host:port) and returns the
// decision; an error or the timeout is Deny with the error.
func (a *asker) decide(ctx context.Context, r AskRequest) (Decision, error) {
	key := hostPort(r.Host, r.Port)
	a.mu.Lock()
	if a.allowed[key] {
		a.mu.Unlock()
		return AllowDomain, nil
	}
	p, ok := a.pending[key]
	if !ok {
		p = &pendingAsk{done: make(chan struct{})}
		a.pending[key] = p
		go a.run(key, p, r)
	}
	a.mu.Unlock()
	select {
	case <-p.done:
		return p.d, p.err
	case <-ctx.Done():
		return Deny, ctx.Err()
	}
}

// run performs one ask, detached from any one waiting request (a client
// that gives up does not cancel the question the developer sees).
func (a *asker) run(key string, p *pendingAsk, r AskRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	type result struct {
		d   Decision
		err error
	}
	ch := make(chan result, 1)
	go func() {
		d, err := a.ask(ctx, r)
		ch <- result{d, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		res.err = fmt.Errorf("no answer within %v", a.timeout)
	}
	if res.err == nil && !res.d.valid() {
		res.err = fmt.Errorf("unknown decision %q", res.d)
	}
	if res.err != nil {
		res.d = Deny
	}
	a.mu.Lock()
	if res.d == AllowDomain {
		a.allowed[key] = true
	}
	delete(a.pending, key)
	a.mu.Unlock()
	p.d, p.err = res.d, res.err
	close(p.done)
}

// AskMessage is the proxy's question to the Runtime Supervisor, one JSON
// line on the ask descriptor.
type AskMessage struct {
	ID      uint64 `json:"id"`
	Session string `json:"session"`
	Host    string `json:"host"`
	Port    uint16 `json:"port"`
	Via     string `json:"via"`
}

// DecisionMessage is the Runtime Supervisor's answer to the AskMessage of
// the same ID, one JSON line.
type DecisionMessage struct {
	ID       uint64   `json:"id"`
	Decision Decision `json:"decision"`
}

// maxLine bounds one line of the ask protocol.
const maxLine = 4096

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, errdefs.New(errdefs.ErrCorrupt, "ask protocol: line longer than %d bytes", maxLine)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

// ReadAsk reads one AskMessage (the Runtime Supervisor's side).
func ReadAsk(r *bufio.Reader) (AskMessage, error) {
	line, err := readLine(r)
	if err != nil {
		return AskMessage{}, err
	}
	var m AskMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return AskMessage{}, errdefs.Mark(fmt.Errorf("ask protocol: %w", err), errdefs.ErrCorrupt)
	}
	if m.Host == "" || m.Port == 0 || m.Session == "" {
		return AskMessage{}, errdefs.New(errdefs.ErrCorrupt, "ask protocol: incomplete ask %s", line)
	}
	return m, nil
}

// WriteDecision writes one DecisionMessage (the Runtime Supervisor's side).
func WriteDecision(w io.Writer, m DecisionMessage) error {
	if !m.Decision.valid() {
		return errdefs.New(errdefs.ErrInvalid, "ask protocol: decision %q is not once, domain or deny", m.Decision)
	}
	return writeJSONLine(w, m)
}

// WriteAsk writes one AskMessage (the proxy's side).
func WriteAsk(w io.Writer, m AskMessage) error { return writeJSONLine(w, m) }

// ReadDecision reads one DecisionMessage (the proxy's side).
func ReadDecision(r *bufio.Reader) (DecisionMessage, error) {
	line, err := readLine(r)
	if err != nil {
		return DecisionMessage{}, err
	}
	var m DecisionMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return DecisionMessage{}, errdefs.Mark(fmt.Errorf("ask protocol: %w", err), errdefs.ErrCorrupt)
	}
	if !m.Decision.valid() {
		return DecisionMessage{}, errdefs.New(errdefs.ErrCorrupt, "ask protocol: decision %q is not once, domain or deny", m.Decision)
	}
	return m, nil
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// NewFDAsker returns an Ask function that puts each request to the
// Runtime Supervisor over f (a stream socket it inherited): it writes an
// AskMessage and waits for the DecisionMessage of the same id. Several asks
// may be outstanding. Once f fails or reaches EOF every ask returns an
// error (which the proxy treats as Deny).
func NewFDAsker(f *os.File) func(context.Context, AskRequest) (Decision, error) {
	return NewStreamAsker(f)
}

// NewStreamAsker is NewFDAsker over any stream.
func NewStreamAsker(rw io.ReadWriter) func(context.Context, AskRequest) (Decision, error) {
	c := &streamAsker{w: rw, waiting: map[uint64]chan Decision{}}
	go c.readLoop(bufio.NewReader(rw))
	return c.ask
}

type streamAsker struct {
	wmu     sync.Mutex
	w       io.Writer
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan Decision
	broken  error
}

func (c *streamAsker) readLoop(r *bufio.Reader) {
	for {
		m, err := ReadDecision(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the Runtime Supervisor closed the ask channel")
			}
			c.mu.Lock()
			c.broken = fmt.Errorf("ask channel: %w", err)
			for id, ch := range c.waiting {
				close(ch)
				delete(c.waiting, id)
			}
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		ch, ok := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		c.mu.Unlock()
		if ok {
			ch <- m.Decision
		}
	}
}

func (c *streamAsker) ask(ctx context.Context, r AskRequest) (Decision, error) {
	c.mu.Lock()
	if c.broken != nil {
		err := c.broken
		c.mu.Unlock()
		return Deny, err
	}
	c.next++
	id := c.next
	ch := make(chan Decision, 1)
	c.waiting[id] = ch
	c.mu.Unlock()
	c.wmu.Lock()
	err := WriteAsk(c.w, AskMessage{ID: id, Session: r.Session, Host: r.Host, Port: r.Port, Via: r.Via})
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
		return Deny, fmt.Errorf("ask channel: %w", err)
	}
	select {
	case d, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.broken
			c.mu.Unlock()
			return Deny, err
		}
		return d, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
		return Deny, ctx.Err()
	}
}
