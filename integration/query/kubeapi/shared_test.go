package kubeapi

import (
	"context"
	"os"
	"testing"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
)

// members are the two member clusters TestKubeFieldSelectors,
// TestTableAsTheMemberPrints and TestKubeProtobuf share (and
// TestBuiltinTableMatchesKubeAPIServer, which reads member1's discovery). Each keeps its
// objects in a namespace of its own (shop, tables, pb) and starts its own
// hubs; what they share is the CronTab CRD (short name ct, category
// fvtest) with the CronTab shop/nightly, in both members. Tests whose
// assertions read every namespace or kind of a member exactly
// (TestKubeAPI, TestCacheEverything, TestKubeListPolicy) keep members of
// their own.
var members = &fixture.SharedFleet{
	Opts: harness.Options{Clusters: []string{"member1", "member2"}},
	Setup: func(t *testing.T, ctx context.Context, fleet *harness.Fleet) {
		fixture.CreateNS(t, ctx, fleet, "shop")
		for _, c := range fleet.Clusters() {
			fixture.InstallCronTabs(t, ctx, c, []string{"ct"}, "nightly")
		}
	},
}

func TestMain(m *testing.M) { os.Exit(members.Run(m)) }
