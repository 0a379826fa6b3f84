package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// RecentDenials is how many egress refusals a Domain's status carries.
const RecentDenials = 5

// Status asks the coordinator for the Domain's state document (the only
// request of this connection).
func (c *Conn) Status() (*lv1.DomainStatus, error) {
	f, err := c.request(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Status{Status: &lv1.StatusRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1}}})
	if err != nil {
		return nil, err
	}
	st := f.GetStatus()
	if st == nil {
		return nil, errdefs.New(errdefs.ErrCorrupt, "the Host Coordinator answered status with %v", f.String())
	}
	if st.Domain != nil {
		return st.Domain, nil
	}
	// A coordinator started by an earlier build sends the document as JSON
	// under the same keys.
	doc := &lv1.DomainStatus{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(st.Json, doc); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("status document: %w", err), errdefs.ErrCorrupt)
	}
	return doc, nil
}

// LiveStatus connects to a running Domain and returns its state document;
// ErrNotPublished when it is not running.
func LiveStatus(paths domain.Paths, profile string) (*lv1.DomainStatus, error) {
	return liveStatusWithin(paths, profile, enrollTimeout)
}

func liveStatusWithin(paths domain.Paths, profile string, bound time.Duration) (*lv1.DomainStatus, error) {
	c, err := connectWithin(paths, profile, bound)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status()
}

// listStatusTimeout bounds each coordinator's answer when Statuses lists
// every Domain: a serving coordinator answers in milliseconds, and one
// that is stopped or hung is shown as unreachable without holding the
// whole list for the enrollment's bound.
const listStatusTimeout = 3 * time.Second

// Statuses is the state document of every Domain under the Storage Root,
// sorted by workspace: a running Domain's from its coordinator; a stopped
// one's from its stored identity (state "stopped"); one whose coordinator
// cannot be reached has state "unreachable" and the reason in error. Each
// carries the newest RecentDenials of its egress refusals. The
// coordinators are asked at once, so that one that does not answer costs
// the list listStatusTimeout, not that much per Domain. When only is set,
// only the coordinators of the Domains whose stored profile and workspace
// it accepts are asked (the others' documents stay "stopped"): a caller
// that wants one workspace's Domains does not wait for an unrelated
// coordinator that does not answer.
func Statuses(roots domain.Roots, only func(profile, workspace string) bool) ([]*lv1.DomainStatus, error) {
	dirs, err := os.ReadDir(filepath.Join(roots.Storage, "domains"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var (
		out []*lv1.DomainStatus
		wg  sync.WaitGroup
	)
	for _, d := range dirs {
		id := domain.ID(d.Name())
		if !id.Valid() {
			continue
		}
		paths, err := domain.PathsFor(roots, id)
		if err != nil {
			continue
		}
		doc := &lv1.DomainStatus{DomainId: proto.String(string(id)), State: proto.String("stopped")}
		out = append(out, doc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			statusOf(paths, doc, only)
		}()
	}
	wg.Wait()
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetWorkspace() < out[j].GetWorkspace() })
	return out, nil
}

// statusOf fills doc, a stopped Domain's document of paths, with its stored
// identity, its coordinator's document if it runs (or why it cannot be
// reached) and its recent egress refusals; a Domain only does not accept
// keeps its identity alone.
func statusOf(paths domain.Paths, doc *lv1.DomainStatus, only func(profile, workspace string) bool) {
	var ident domain.StoredIdentity
	if b, err := os.ReadFile(filepath.Join(paths.DomainRoot, "domain.json")); err == nil && json.Unmarshal(b, &ident) == nil {
		doc.Profile, doc.Workspace = proto.String(ident.Profile), proto.String(ident.Workspace)
	}
	if only != nil && !only(ident.Profile, ident.Workspace) {
		return
	}
	if ident.Profile != "" {
		if live, err := liveStatusWithin(paths, ident.Profile, listStatusTimeout); err == nil {
			proto.Reset(doc)
			proto.Merge(doc, live)
		} else if !errors.Is(err, ErrNotPublished) {
			doc.State, doc.Error = proto.String("unreachable"), proto.String(err.Error())
		}
	}
	if ds, err := egress.ReadDenials(paths.NetworkDenials()); err == nil && len(ds) > 0 {
		for _, x := range ds[max(0, len(ds)-RecentDenials):] {
			doc.RecentDenials = append(doc.RecentDenials, DenialStatus(x))
		}
	}
}

// DenialStatus is d as a status document carries it: the fields of the
// denial log's line, the address only when known.
func DenialStatus(d egress.Denial) *lv1.EgressDenial {
	e := &lv1.EgressDenial{
		V: proto.Int32(int32(d.V)), Time: proto.String(d.Time.Format(time.RFC3339Nano)), Session: proto.String(d.Session),
		Host: proto.String(d.Host), Port: proto.Uint32(uint32(d.Port)), Via: proto.String(d.Via),
		Reason: proto.String(d.Reason), Decision: proto.String(d.Decision),
	}
	if d.Addr != "" {
		e.Addr = proto.String(d.Addr)
	}
	return e
}

// Denial is the egress.Denial a status document's entry stands for (a
// time that does not parse is the zero time).
func Denial(e *lv1.EgressDenial) egress.Denial {
	t, _ := time.Parse(time.RFC3339Nano, e.GetTime())
	return egress.Denial{
		V: int(e.GetV()), Time: t, Session: e.GetSession(), Host: e.GetHost(), Port: uint16(e.GetPort()),
		Addr: e.GetAddr(), Via: e.GetVia(), Reason: e.GetReason(), Decision: e.GetDecision(),
	}
}
