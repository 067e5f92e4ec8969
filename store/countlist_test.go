package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// pagedLister lists its objects in pages of the asked limit, the cursor
// being the next index; it records the options it was asked with.
type pagedLister struct {
	objs  []query.Object
	asked []query.ListOptions
}

func (p *pagedLister) Get(context.Context, query.GetOptions) (query.Object, error) {
	return query.Object{}, nil
}
func (p *pagedLister) Versions(context.Context) (query.Version, error) { return nil, nil }
func (p *pagedLister) Search(context.Context, query.SearchOptions) (query.Page, error) {
	return query.Page{}, nil
}

func (p *pagedLister) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	p.asked = append(p.asked, o)
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	to := min(from+int(o.Limit), len(p.objs))
	page := query.Page{Items: p.objs[from:to]}
	if to < len(p.objs) {
		page.Continue = strconv.Itoa(to)
	}
	return page, nil
}

// TestCountByListing: a backend without counts of its own is counted over
// every page of its list, each object's dimensions read from its JSON
// (labels with dots and slashes in their keys, images of containers and
// init containers, absent fields as ""), with the selection and the
// caller's visibility handed to the list.
func TestCountByListing(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	var objs []query.Object
	for i := range 2500 {
		init := ""
		if i%2 == 0 {
			init = `,"initContainers":[{"image":"busybox"}]`
		}
		phase := `,"status":{"phase":"Running"}`
		if i%5 == 0 {
			phase = ""
		}
		objs = append(objs, query.Object{Cluster: fmt.Sprintf("c%d", i%3), JSON: fmt.Appendf(nil,
			`{"metadata":{"namespace":"ns%d","name":"p%d","labels":{"app.kubernetes.io/name":"a%d"}},"spec":{"containers":[{"image":"img%d"}]%s}%s}`,
			i%2, i, i%2, i%4, init, phase)})
	}
	vis := &query.Visibility{Grants: []query.Grant{{Clusters: []string{"c0"}}}}
	for _, tc := range []struct {
		by   []string
		want string
	}{
		{[]string{"cluster"}, "c0=834 c1=833 c2=833 total=2500"},
		{[]string{"label:app.kubernetes.io/name", "namespace"}, "a0|ns0=1250 a1|ns1=1250 total=2500"},
		{[]string{"image"}, "busybox=1250 img0=625 img1=625 img2=625 img3=625 total=2500"},
		{[]string{"field:status.phase", "kind"}, "|pods=500 Running|pods=2000 total=2500"},
		{nil, "total=2500"},
	} {
		t.Run(strings.Join(tc.by, ","), func(t *testing.T) {
			l := &pagedLister{objs: objs}
			o := query.CountOptions{GVR: pods, Namespace: "", Visible: vis, Clusters: []string{"c0", "c1", "c2"}}
			for _, b := range tc.by {
				d, err := query.ParseDimension(b)
				if err != nil {
					t.Fatal(err)
				}
				o.By = append(o.By, d)
			}
			c, err := countByListing(context.Background(), l, o)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, r := range c.Rows {
				fmt.Fprintf(&b, "%s=%d ", strings.Join(r.Values, "|"), r.Count)
			}
			fmt.Fprintf(&b, "total=%d", c.Total)
			if b.String() != tc.want {
				t.Errorf("counts %s, want %s", b.String(), tc.want)
			}
			if c.Scanned != "objects" || len(l.asked) != 3 {
				t.Errorf("scanned %q in %d pages, want objects in 3", c.Scanned, len(l.asked))
			}
			if l.asked[0].Visible != vis || len(l.asked[0].Clusters) != 3 {
				t.Errorf("the list was not handed the visibility and the clusters: %+v", l.asked[0])
			}
		})
	}
}
