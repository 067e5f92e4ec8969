package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// TestCompromisedCollectorMalformedObject: member1's own collector
// credential (a hub with per-cluster NATS users) publishes, on its own
// stream subject, a Pod whose JSON is broken deep inside
// (`"spec":{"a" 1 2}`), then a valid Pod. The broken one is dead-lettered
// with its reason and never applied; the valid one after it is applied;
// member2's objects in the REST list, /api/v1/pods and its namespace, the
// Table `kubectl get pods -A` asks for and a watch open across the attack
// stay valid JSON and unchanged.
func TestCompromisedCollectorMalformedObject(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, "member1", "member2")
	fixture.CreateNS(t, ctx, fleet, "shop")
	bin := fixture.BuildFleetview(t)
	dir := t.TempDir()
	const pass1, hubPass = "member1-secret-0123456789", "hub-secret-0123456789abcdef"
	usersFile, hubFile, user1 := filepath.Join(dir, "nats-users"), filepath.Join(dir, "hub-pass"), filepath.Join(dir, "nats-user-1")
	for f, s := range map[string]string{usersFile: "member1:" + pass1 + "\n", hubFile: hubPass + "\n", user1: "member1:" + pass1 + "\n"} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	natsAddr, natsPort := fixture.FreePort(t)
	o := fixture.UpOptions(t, fleet, filepath.Join(dir, "state"))
	o.Contexts = []string{"member2"} // member2's collector runs in the hub
	o.NATSHost, o.NATSPort, o.NATSUsersFile, o.NATSHubPasswordFile = "127.0.0.1", natsPort, usersFile, hubFile
	fv := fixture.StartUp(t, o)
	defer fv.Stop(t)
	url := "nats://" + natsAddr

	// member1's real collector, with its own credential.
	fixture.StartProc(t, bin, []string{"collector", "--cluster", "member1", "--kubeconfig", o.Kubeconfig, "--context", "member1",
		"--nats-url", url, "--nats-user-file", user1, "--heartbeat", "2s"}, fixture.ProcessLog(t, "member1-collector.log"))
	if _, err := fv.Registries.ApplyRegistry(ctx, fixture.RegistryRequest(t, "pods", "v1:Pod")); err != nil {
		t.Fatal(err)
	}
	c1, c2 := fleet.Cluster("member1").Clientset(), fleet.Cluster("member2").Clientset()
	must := fixture.MustOK(t)
	must(c1.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-a"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "web", "web", "node-b"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "api", "api", "node-a"), metav1.CreateOptions{}))
	fixture.Eventually(t, 120*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "api"}))
	})

	// The objects can be listed before the collectors' inventories carry
	// the member's printer columns; until then a Table falls back to
	// NAME/AGE. The snapshot waits for the columns kubectl would print.
	fixture.Eventually(t, 60*time.Second, func() error {
		tbl, err := getTable(fv.REST + "/api/v1/pods")
		if err != nil {
			return err
		}
		if len(tbl.ColumnDefinitions) < 6 || tbl.ColumnDefinitions[2].Name != "Ready" {
			return fmt.Errorf("Table columns %v, want CLUSTER and the member's Pod columns", tbl.ColumnDefinitions)
		}
		return nil
	})
	paths := []struct{ path, accept string }{
		{"/v1/resources/core/v1/pods", ""},
		{"/api/v1/pods", ""},
		{"/api/v1/namespaces/shop/pods", ""},
		{"/api/v1/pods", tableAccept},
	}
	before := map[string][]string{}
	for _, p := range paths {
		before[p.path+p.accept] = member2Items(t, fv.REST+p.path, p.accept)
		if len(before[p.path+p.accept]) != 2 {
			t.Fatalf("%s (%s): member2's items %q", p.path, p.accept, before[p.path+p.accept])
		}
	}
	w := startKubeWatch(t, fv.REST+"/api/v1/pods?watch=true")
	defer w.stop()
	wt := startKubeWatch(t, fv.REST+"/api/v1/pods?watch=true&accept=table")
	defer wt.stop()

	// member1's credential, playing its collector.
	_, js := fixture.ClusterCredential(t, url, "member1", pass1)
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	publish := func(uid, name, object string) string {
		t.Helper()
		ev := &fleetviewv1.ResourceEvent{Cluster: "member1", Gvr: stream.ProtoGVR(pods), Uid: uid, Name: name, Namespace: "shop",
			Kind: "Pod", ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(object)}
		data, err := stream.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		subj := stream.ObjectSubject("member1", pods, uid)
		if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(stream.MsgID(ev))); err != nil {
			t.Fatalf("member1 publishes on its own subject %s: %v", subj, err)
		}
		return subj
	}
	obj := func(uid, name, spec string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","namespace":"shop","uid":"` + uid +
			`","creationTimestamp":"2026-01-01T00:00:00Z","annotations":{"fleetview.io/cluster":"member1","resource.karmada.io/cached-from-cluster":"member1"}},"spec":` + spec + `}`
	}
	badSubj := publish("forged-bad", "forged-bad", obj("forged-bad", "forged-bad", `{"a" 1 2}`))
	publish("forged-good", "forged-good", obj("forged-good", "forged-good", `{"containers":[{"name":"c","image":"x"}]}`))

	// The valid Pod after it is applied.
	fixture.Eventually(t, 30*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member1", Namespace: "shop", Name: "forged-good"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "web"}, fixture.Ref{Cluster: "member2", Namespace: "shop", Name: "api"}))
	})
	// The broken one is in the dead letters with what is wrong and where.
	hub, err := nats.Connect(url, nats.UserInfo(natsserver.HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, err := jetstream.New(hub)
	if err != nil {
		t.Fatal(err)
	}
	fixture.Eventually(t, 30*time.Second, func() error {
		st, err := hjs.Stream(ctx, materializer.DeadStream)
		if err != nil {
			return err
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		var seen []string
		for msg := range batch.Messages() {
			h := msg.Headers()
			if h.Get(materializer.HdrDeadSubject) == badSubj {
				if r := h.Get(materializer.HdrDeadReason); strings.Contains(r, "shop/forged-bad") && strings.Contains(r, "':' expected after an object key") {
					return nil
				}
			}
			seen = append(seen, h.Get(materializer.HdrDeadSubject)+": "+h.Get(materializer.HdrDeadReason))
		}
		return fmt.Errorf("no dead letter for %s with its reason; dead letters: %q", badSubj, seen)
	})

	// Every answer valid JSON; member2's part unchanged; the bad Pod in none.
	for _, p := range paths {
		if got := member2Items(t, fv.REST+p.path, p.accept); !slices.Equal(got, before[p.path+p.accept]) {
			t.Errorf("%s (%s): member2's items changed:\n got %q\nwant %q", p.path, p.accept, got, before[p.path+p.accept])
		}
	}
	// Both watches, open across the attack, got the valid Pod and only
	// valid lines, and are still open.
	for _, w := range []*kubeWatch{w, wt} {
		fixture.Eventually(t, 30*time.Second, func() error {
			lines, err := w.snapshot()
			if err != nil {
				return err
			}
			for _, l := range lines {
				if strings.Contains(l, "forged-bad") {
					return fmt.Errorf("%s: the broken Pod was sent: %s", w.url, l)
				}
				if strings.Contains(l, "forged-good") {
					return nil
				}
			}
			return fmt.Errorf("%s: no event for forged-good in %d lines", w.url, len(lines))
		})
	}
	// And a change in member2 still reaches them.
	must(c2.CoreV1().Pods("shop").Create(ctx, fixture.QPod("shop", "late", "late", "node-a"), metav1.CreateOptions{}))
	for _, w := range []*kubeWatch{w, wt} {
		fixture.Eventually(t, 30*time.Second, func() error {
			lines, err := w.snapshot()
			if err != nil {
				return err
			}
			for _, l := range lines {
				if strings.Contains(l, `"late"`) && strings.Contains(l, "member2") {
					return nil
				}
			}
			return fmt.Errorf("%s: member2's new Pod not seen", w.url)
		})
	}
}

// member2Items GETs url and returns member2's items (their JSON, or for a
// Table each row's cells), sorted, after checking the whole answer is a
// valid JSON document of the kind asked.
func member2Items(t *testing.T, url, accept string) []string {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !json.Valid(b) {
		t.Fatalf("GET %s (%s): %d, valid JSON %v: %.500s", url, accept, resp.StatusCode, json.Valid(b), b)
	}
	var out []string
	if accept == tableAccept {
		var tbl metav1.Table
		if err := json.Unmarshal(b, &tbl); err != nil || tbl.Kind != "Table" {
			t.Fatalf("GET %s as Table: %v %.300s", url, err, b)
		}
		for _, r := range tbl.Rows {
			if len(r.Cells) < 6 {
				t.Fatalf("GET %s as Table: row %v has %d cells, want CLUSTER and the member's Pod columns", url, r.Cells, len(r.Cells))
			}
			if r.Cells[0] == "member2" {
				cells, _ := json.Marshal(append(r.Cells[:5:5], r.Cells[6:]...)) // without AGE
				out = append(out, string(cells))
			}
		}
	} else {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		for _, it := range list.Items {
			if bytes.Contains(it, []byte(`"fleetview.io/cluster":"member2"`)) {
				out = append(out, string(it))
			}
		}
	}
	slices.Sort(out)
	return out
}

// getTable GETs url as a Table.
func getTable(url string) (*metav1.Table, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", tableAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var tbl metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&tbl); err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s as Table: %d %v", url, resp.StatusCode, err)
	}
	return &tbl, nil
}

// kubeWatch reads a Kubernetes watch stream's lines as they come.
type kubeWatch struct {
	url    string
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	lines  []string
	err    error
}

func startKubeWatch(t *testing.T, url string) *kubeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &kubeWatch{url: url, cancel: cancel, done: make(chan struct{})}
	u, table := strings.CutSuffix(url, "&accept=table")
	w.url = u
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if table {
		req.Header.Set("Accept", tableAccept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		t.Fatalf("watch %s: %v %v", u, resp, err)
	}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			w.mu.Lock()
			if !json.Valid(sc.Bytes()) && w.err == nil {
				w.err = fmt.Errorf("watch %s: invalid JSON line %q", u, sc.Bytes())
			}
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
		}
		w.mu.Lock()
		if w.err == nil && ctx.Err() == nil {
			w.err = fmt.Errorf("watch %s ended: %v", u, sc.Err())
		}
		w.mu.Unlock()
	}()
	return w
}

// snapshot returns the lines so far, or why the watch is no good.
func (w *kubeWatch) snapshot() ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines), w.err
}

func (w *kubeWatch) stop() {
	w.cancel()
	<-w.done
}
