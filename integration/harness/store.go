package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"
)

// StorePods writes pod(0) .. pod(n-1) straight into the cluster's etcd,
// as the apiserver stores a created Pod (protobuf, under
// /<cluster>/pods/<namespace>/<name>, with a uid and creation time and
// no resourceVersion), and waits until the apiserver lists all n of
// them. It is for loading a benchmark's fixture: a create through the
// apiserver costs it admission, validation and a watch-cache round per
// Pod, and 150k creates took minutes of the benchmarks' time, where
// these writes take seconds (measured: docs/benchmarks/query.md#command). What the apiserver would have added
// on create (defaults, admission) the fixture sets itself: DefaultPod,
// checked against the apiserver's own create by TestFleet/StorePodsAsCreated.
// The Pods' namespaces must exist; pods already stored are overwritten.
func (c *Cluster) StorePods(ctx context.Context, n, workers int, pod func(i int) (*corev1.Pod, error)) error {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		return fmt.Errorf("no protobuf serializer in client-go's scheme")
	}
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	hc := &http.Client{Timeout: time.Minute}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// etcd refuses a transaction of more than --max-txn-ops (128) puts.
	const perTxn = 128
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				from := int(next.Add(perTxn) - perTxn)
				if from >= n {
					return
				}
				if err := c.storeBatch(ctx, hc, enc, from, min(from+perTxn, n), pod); err != nil {
					errs <- err
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
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.waitPodCount(ctx, n)
}

// storeBatch puts pods [from, to) in one etcd transaction through etcd's
// JSON gateway (no etcd client library needed for one call).
func (c *Cluster) storeBatch(ctx context.Context, hc *http.Client, enc runtime.Encoder, from, to int, pod func(i int) (*corev1.Pod, error)) error {
	type put struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	type op struct {
		RequestPut put `json:"requestPut"`
	}
	ops := make([]op, 0, to-from)
	now := metav1.Now()
	for i := from; i < to; i++ {
		p, err := pod(i)
		if err != nil {
			return fmt.Errorf("%s: pod %d: %w", c.Name, i, err)
		}
		p = p.DeepCopy()
		p.UID, p.ResourceVersion, p.CreationTimestamp = uuid.NewUUID(), "", now
		var buf bytes.Buffer
		if err := enc.Encode(p, &buf); err != nil {
			return fmt.Errorf("%s: encode pod %d: %w", c.Name, i, err)
		}
		key := fmt.Sprintf("/%s/pods/%s/%s", c.Name, p.Namespace, p.Name)
		ops = append(ops, op{put{base64.StdEncoding.EncodeToString([]byte(key)), base64.StdEncoding.EncodeToString(buf.Bytes())}})
	}
	body, err := json.Marshal(map[string]any{"success": ops})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.fleet.etcdURL+"/v3/kv/txn", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: store pods %d-%d in etcd: %w", c.Name, from, to-1, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: store pods %d-%d in etcd: %s: %s", c.Name, from, to-1, resp.Status, msg)
	}
	return nil
}

// waitPodCount waits until the apiserver lists n Pods in all namespaces:
// it learns of the writes by its etcd watch, and a benchmark that starts
// before then would measure a partial fixture.
func (c *Cluster) waitPodCount(ctx context.Context, n int) error {
	cs := c.Clientset()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		// A consistent list (the watch cache answers it once it has caught
		// up with etcd) of one Pod: the count is in its
		// remainingItemCount, without sending n Pods.
		l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
		got := -1
		if err == nil {
			got = len(l.Items)
			if l.RemainingItemCount != nil {
				got += int(*l.RemainingItemCount)
			}
			if got >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: apiserver lists %d of the %d Pods stored in etcd after 5 minutes (last error: %v)", c.Name, got, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DefaultPod sets on p what the harness's kube-apiserver sets on a Pod it
// creates (its defaulting and default admission plugins) for the fields a
// fixture leaves empty, so a Pod written by StorePods reads back as the
// same Pod created through the apiserver would.
func DefaultPod(p *corev1.Pod) {
	s := &p.Spec
	if p.Generation == 0 {
		p.Generation = 1
	}
	setDefault(&s.RestartPolicy, corev1.RestartPolicyAlways)
	setDefault(&s.DNSPolicy, corev1.DNSClusterFirst)
	setDefault(&s.SchedulerName, corev1.DefaultSchedulerName)
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptr(true)
	}
	if s.PreemptionPolicy == nil {
		s.PreemptionPolicy = ptr(corev1.PreemptLowerPriority)
	}
	if s.Priority == nil {
		s.Priority = ptr(int32(0))
	}
	for i := range s.Containers {
		c := &s.Containers[i]
		setDefault(&c.TerminationMessagePath, corev1.TerminationMessagePathDefault)
		setDefault(&c.TerminationMessagePolicy, corev1.TerminationMessageReadFile)
		setDefault(&c.ImagePullPolicy, corev1.PullIfNotPresent)
		for j := range c.Ports {
			setDefault(&c.Ports[j].Protocol, corev1.ProtocolTCP)
		}
		for j := range c.Env {
			if f := c.Env[j].ValueFrom; f != nil && f.FieldRef != nil {
				setDefault(&f.FieldRef.APIVersion, "v1")
			}
		}
	}
	// The DefaultTolerationSeconds admission plugin adds the two it
	// manages where a Pod has not its own.
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		if !slices.ContainsFunc(s.Tolerations, func(t corev1.Toleration) bool { return t.Key == key }) {
			s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))})
		}
	}
	// A create keeps no status of its own: Pending, and the QoS class.
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: qosClass(s)}
}

// qosClass is the Pod's QoS class as the apiserver computes it, for the
// resources a fixture sets (cpu and memory, no init containers).
func qosClass(s *corev1.PodSpec) corev1.PodQOSClass {
	set, guaranteed := false, true
	for _, c := range s.Containers {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			lim, hasLim := c.Resources.Limits[r]
			req, hasReq := c.Resources.Requests[r]
			set = set || hasLim || hasReq
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !set:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func setDefault[T comparable](field *T, v T) {
	var zero T
	if *field == zero {
		*field = v
	}
}

func ptr[T any](v T) *T { return &v }
