package harness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CreatePods creates pod(0) .. pod(n-1) with workers concurrent creates,
// for loading a benchmark's fixture: through a client of its own with no
// client-side throttling (the shared admin client's 200 QPS would make
// the load the slowest part of a benchmark) and in protobuf, which costs
// the apiserver less to decode than JSON. A create the apiserver fails
// under the load is retried, a second apart, up to five times; one that
// an earlier, timed-out attempt did make counts as created. The Pods'
// namespaces must exist.
func (c *Cluster) CreatePods(ctx context.Context, n, workers int, pod func(i int) (*corev1.Pod, error)) error {
	cfg := c.AdminRESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				p, err := pod(i)
				if err == nil {
					err = createRetrying(ctx, cs, p)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: create pod %d: %w", c.Name, i, err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

func createRetrying(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) error {
	for attempt := 0; ; attempt++ {
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) && attempt > 0 {
			return nil
		}
		if err == nil || attempt == 5 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
