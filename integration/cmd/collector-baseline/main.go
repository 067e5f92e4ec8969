// Command collector-baseline is the baseline the collector benchmark
// (integration/bench/collector_bench_test.go) runs beside the collector, in the
// same run and against the same kube-apiserver:
//
//   - raw: pages through every object of a resource as JSON bytes, without
//     decoding them: how fast the apiserver serves them, the ceiling for any
//     collector;
//   - raw-table: the same asking for Tables with the whole object in each
//     row, as the collector does (the member prints every object's cells):
//     the ceiling for the collector's own requests;
//   - list: the same with the dynamic client, which decodes every object into
//     map[string]any (what an unstructured informer does on its list);
//   - informer: a client-go dynamic informer (what karmada-search runs per
//     cluster and resource) until it has synced: its time and peak memory.
//
// It prints one line of key=value figures, including its own peak RSS
// (VmHWM), and exits.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig")
	kctx := flag.String("context", "", "context")
	mode := flag.String("mode", "list", "raw, raw-table, list or informer")
	resource := flag.String("resource", "pods", "core/v1 resource")
	flag.Parse()
	if err := run(*kubeconfig, *kctx, *mode, *resource); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, kctx, mode, resource string) error {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kctx}).ClientConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: resource}
	ctx := context.Background()
	start := time.Now()
	n := 0
	switch mode {
	case "raw", "raw-table":
		cfg.DisableCompression = true
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		// The next page is requested as soon as this one's continue token
		// is read (the list metadata comes before the items), and the
		// items are parsed meanwhile: the apiserver never waits for this
		// client, so this is the most any client can get from it.
		type page struct {
			body []byte
			err  error
		}
		fetch := func(cont string) page {
			req := cs.CoreV1().RESTClient().Get().AbsPath("/api", "v1", resource).Param("limit", "500").SetHeader("Accept", "application/json")
			if mode == "raw-table" {
				req = req.SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json").Param("includeObject", "Object")
			}
			if cont != "" {
				req = req.Param("continue", cont)
			}
			body, err := req.DoRaw(ctx)
			return page{body, err}
		}
		p := fetch("")
		for {
			if p.err != nil {
				return p.err
			}
			cont, err := continueToken(p.body, mode == "raw-table")
			if err != nil {
				return err
			}
			next := make(chan page, 1)
			if cont != "" {
				go func() { next <- fetch(cont) }()
			}
			var l struct {
				Items []json.RawMessage `json:"items"`
				Rows  []json.RawMessage `json:"rows"`
			}
			if err := json.Unmarshal(p.body, &l); err != nil {
				return err
			}
			n += len(l.Items) + len(l.Rows)
			if cont == "" {
				break
			}
			p = <-next
		}
	case "list":
		opts := metav1.ListOptions{Limit: 500}
		for {
			l, err := dyn.Resource(gvr).List(ctx, opts)
			if err != nil {
				return err
			}
			n += len(l.Items)
			if opts.Continue = l.GetContinue(); opts.Continue == "" {
				break
			}
		}
	case "informer":
		f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
		inf := f.ForResource(gvr).Informer()
		stop := make(chan struct{})
		defer close(stop)
		f.Start(stop)
		if !cache.WaitForCacheSync(stop, inf.HasSynced) {
			return fmt.Errorf("informer did not sync")
		}
		n = len(inf.GetStore().ListKeys())
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	el := time.Since(start)
	fmt.Printf("mode=%s objects=%d seconds=%.2f objects_per_second=%.0f peak_rss_mb=%.1f\n", mode, n, el.Seconds(), float64(n)/el.Seconds(), peakRSSMB(os.Getpid()))
	return nil
}

func peakRSSMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")), "%f", &kb)
			return kb / 1024
		}
	}
	return -1
}

// continueToken reads metadata.continue from the head of a list response
// (the apiserver writes the list's metadata before its items, and a
// Table's before its rows). The head ends at the first items (or rows)
// key: a Table's rows carry whole Pods, whose projected volumes have
// "items" keys of their own, so a Table is cut at "rows".
func continueToken(body []byte, table bool) (string, error) {
	key := `"items":`
	if table {
		key = `"rows":`
	}
	head := body
	if i := bytes.Index(body, []byte(key)); i > 0 {
		head = append(append([]byte(nil), body[:i]...), []byte(key+`[]}`)...)
	}
	var l struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(head, &l); err != nil {
		return "", fmt.Errorf("list metadata: %w", err)
	}
	return l.Metadata.Continue, nil
}
