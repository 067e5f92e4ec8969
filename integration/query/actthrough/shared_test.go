package actthrough

import (
	"os"
	"testing"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/integration/harness"
)

// members are the two member clusters TestActThrough, TestActThroughOff,
// TestActThroughAdversarial, TestActThroughFairRelay,
// TestActThroughLatency and TestActThroughUp share. Each starts its own
// hub and collectors (TestActThrough kills only its own collector, no
// member) and keeps to a namespace of its own (shop, off, adv and other,
// fair, latency, up) with grantActRBAC's objects named after it.
// TestMemberIdentityMapReserved keeps a member of its own: its
// kube-apiserver runs with an audit log.
var members = &fixture.SharedFleet{Opts: harness.Options{Clusters: []string{"member1", "member2"}}}

func TestMain(m *testing.M) { os.Exit(members.Run(m)) }
