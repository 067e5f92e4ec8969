package collector

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// watchScope watches one scope from rv, resuming after a closed watch and
// retrying while the apiserver is unreachable. It returns errRelist when the
// watch cannot resume (410 Gone) and an error when a publish failed.
func (s *resourceSync) watchScope(ctx context.Context, ns, rv string) error {
	ri := s.dyn.Resource(s.w.gvr).Namespace(ns)
	b := backoff{max: 10 * time.Second}
	for {
		timeout := int64(watchTimeout / time.Second)
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return errRelist
			}
			s.log.Warn("watch failed; retrying", "namespace", ns, "err", err)
			if !b.wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		var got bool
		rv, got, err = s.consume(ctx, w, rv)
		w.Stop()
		if err != nil {
			return err
		}
		if got {
			b.reset()
		}
	}
}

func (s *resourceSync) consume(ctx context.Context, w watch.Interface, rv string) (string, bool, error) {
	got := false
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, got, ctx.Err()
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, got, nil
		}
		got = true
		switch ev.Type {
		case watch.Added, watch.Modified:
			u, isU := ev.Object.(*unstructured.Unstructured)
			if !isU {
				return rv, got, fmt.Errorf("unexpected object type %T", ev.Object)
			}
			b, err := u.MarshalJSON()
			if err != nil {
				return rv, got, err
			}
			m := objMeta{uid: string(u.GetUID()), namespace: u.GetNamespace(), name: u.GetName(), rv: u.GetResourceVersion()}
			if err := s.upsert(ctx, m, b, 0); err != nil {
				return rv, got, err
			}
			rv = m.rv
		case watch.Deleted:
			if err := s.remove(ctx, ev.Object); err != nil {
				return rv, got, err
			}
			if m, err := metaOf(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
		case watch.Bookmark:
			if m, err := metaOf(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return rv, got, errRelist
			}
			return rv, got, fmt.Errorf("watch %s: %w", s.w.gvr, err)
		}
	}
}

func metaOf(obj any) (metav1.Object, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	return nil, fmt.Errorf("unexpected object type %T", obj)
}
