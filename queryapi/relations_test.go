package queryapi

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// TestNoRelations: a watch refuses relation field selectors with a 400
// naming the field, and takes every other field selector.
func TestNoRelations(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for _, tc := range []struct{ sel, want string }{
		{"fleetview.io/ownedBy=Deployment/web", "fleetview.io/ownedBy is not supported in a watch"},
		{"status.phase=Running,fleetview.io/references=Secret/db", "fleetview.io/references is not supported in a watch"},
		{"status.phase=Running", ""},
		{"", ""},
	} {
		f, err := query.CompileFields(pods, tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		err = noRelations(f, "a watch")
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, query.ErrInvalid) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.sel, err, tc.want)
		}
	}
}
