package collector

import (
	"context"
	"fmt"
	"io"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// cycle lists every namespace scope, tombstones what the lists no longer
// return, publishes the SYNCED marker once every publish is acknowledged,
// then watches until a relist is needed.
func (s *resourceSync) cycle(ctx context.Context) error {
	select { // this list satisfies any relist requested before it
	case <-s.relist:
	default:
	}
	gen := s.ledger.nextGen()
	scopes := s.scopes()
	rvs := make([]string, len(scopes))
	for i, ns := range scopes {
		rv, err := s.listScope(ctx, ns, gen)
		if err != nil {
			return err
		}
		rvs[i] = rv
	}
	if err := s.sweep(ctx, gen); err != nil {
		return err
	}
	if err := s.pub.flush(ctx); err != nil {
		return err
	}
	select { // a publish of this list failed: its object was forgotten
	case <-s.relist:
		return errRelist
	default:
	}
	if err := s.publishControl(ctx, fleetviewv1.EventType_EVENT_TYPE_SYNCED); err != nil {
		return err
	}
	s.synced.Store(true)
	s.pub.syncChanged()
	s.setErr(nil)
	s.log.Info("synced", "objects", s.ledger.size())

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(scopes))
	for i, ns := range scopes {
		go func() { errc <- s.watchScope(wctx, ns, rvs[i]) }()
	}
	var err error
	waiting := len(scopes)
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.relist:
		err = errRelist
	case err = <-errc:
		waiting--
	}
	cancel()
	for range waiting {
		<-errc
	}
	return err
}

func (s *resourceSync) scopes() []string {
	if s.w.namespaces == nil || !s.w.namespaced {
		return []string{metav1.NamespaceAll}
	}
	return s.w.namespaces
}

// listScope lists one namespace scope page by page, publishing what changed;
// it returns the list's resourceVersion to watch from. Pages are streamed
// item by item as raw JSON (liststream.go, internal/rawjson): only changed
// objects are pruned and re-encoded, and a page costs one window buffer that
// grows only to its largest object, whatever the page size. The fetcher reads the
// head of each response (the list metadata comes before the items) and asks
// for the next page at once, so the apiserver builds it while this one is
// published. Two windows exist and they are reused: nothing keeps a
// reference into one once its item has been published (metadata strings,
// pruned objects and events are copies).
func (s *resourceSync) listScope(ctx context.Context, ns string, gen uint32) (string, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Unbuffered: one page is published while the fetcher holds the next
	// (its request made, its head read); more would only hold more
	// responses open in the transport.
	pages := make(chan *listPage)
	free := make(chan []byte, listWindows)
	for range listWindows {
		free <- make([]byte, 0, listWindow)
	}
	errc := make(chan error, 1)
	go func() {
		defer close(pages)
		errc <- s.fetchPages(lctx, ns, free, pages)
	}()
	rv := ""
	var err error
	for page := range pages {
		var prv string
		prv, err = s.publishPage(ctx, ns, page, gen)
		page.body.Close()
		free <- page.lr.window()
		if err != nil {
			cancel() // the fetcher stops and closes what it holds
			break
		}
		rv = prv
	}
	if ferr := <-errc; err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		return "", err
	}
	return rv, nil
}

// listWindows is how many list pages are open at once: one being published,
// one whose head the fetcher has read.
const listWindows = 2

// listPage is one list response whose head has been read.
type listPage struct {
	lr   *listReader
	body io.Closer
	// cont receives the continue token once the page is read: the fetcher
	// waits for it when the metadata came after the items.
	cont chan string
}

// publishPage publishes the items (or Table rows) of one page and returns
// its resourceVersion.
func (s *resourceSync) publishPage(ctx context.Context, ns string, page *listPage, gen uint32) (string, error) {
	if err := s.setColumns(page.lr.columns); err != nil {
		return "", fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
	}
	for {
		item, ok, err := page.lr.next()
		if err != nil {
			return "", fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
		}
		if !ok {
			break
		}
		var cells []byte
		if page.lr.rows {
			if item, cells, err = s.tableRow(item); err != nil {
				return "", fmt.Errorf("list %s in %q: row %d: %w", s.w.gvr, ns, page.lr.items, err)
			}
		}
		m, err := readMeta(item)
		if err != nil {
			return "", fmt.Errorf("list %s in %q: item %d: %w", s.w.gvr, ns, page.lr.items, err)
		}
		if err := s.upsert(ctx, m, item, cells, gen); err != nil {
			return "", err
		}
	}
	page.cont <- page.lr.meta.continueToken
	return page.lr.meta.resourceVersion, nil
}

// fetchPages requests every page of one list, reads the head of each into a
// window taken from free and sends it to out; it requests the next page as
// soon as the head (or, when the metadata follows the items, the consumer)
// gave its continue token.
func (s *resourceSync) fetchPages(ctx context.Context, ns string, free <-chan []byte, out chan<- *listPage) error {
	cont := ""
	for {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		req := s.raw.Get().AbsPath(s.path(ns)...).SetHeader("Accept", tableAccept).
			Param("includeObject", includeObject).Param("limit", strconv.FormatInt(s.pageSize, 10))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.Stream(ctx)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				// The continue token outlived the snapshot: objects marked
				// so far may since have been deleted, so start a new
				// generation rather than mix two snapshots.
				return errRelist
			}
			return fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
		}
		page := &listPage{lr: newListReader(body, buf), body: body, cont: make(chan string, 1)}
		if err := page.lr.readHead(); err != nil {
			body.Close()
			return fmt.Errorf("list %s in %q: %w", s.w.gvr, ns, err)
		}
		// Read before the page is handed on: the consumer owns it then.
		early, next := page.lr.headKnown(), page.lr.meta.continueToken
		select {
		case out <- page:
		case <-ctx.Done():
			body.Close()
			return ctx.Err()
		}
		if !early {
			select {
			case next = <-page.cont:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if next == "" {
			return nil
		}
		cont = next
	}
}

// path is the REST path of the resource in namespace ns ("" = all).
func (s *resourceSync) path(ns string) []string {
	p := []string{"/api", s.w.gvr.Version}
	if s.w.gvr.Group != "" {
		p = []string{"/apis", s.w.gvr.Group, s.w.gvr.Version}
	}
	if ns != "" {
		p = append(p, "namespaces", ns)
	}
	return append(p, s.w.gvr.Resource)
}

// sweep tombstones every object the last list did not return.
func (s *resourceSync) sweep(ctx context.Context, gen uint32) error {
	for _, g := range s.ledger.unseen(gen) {
		if err := s.removeRef(ctx, g.uid, g.ref.rv, g.ref); err != nil {
			return err
		}
	}
	return nil
}
