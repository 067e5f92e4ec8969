// Package opensearch runs real OpenSearch 2.19 nodes for tests, demos and
// benchmarks, one alone or several as a cluster, without a distribution or
// container.
//
// The node is a plain JVM started from Maven Central jars: the small Maven
// project in launcher/ is built (once, cached outside the repository) by
// scripts/build-opensearch.sh, and Start forks
//
//	java -Xms512m -Xmx512m -cp launcher.jar:<deps> org.fleetview.opensearch.Launcher
//
// with a fresh temporary path.home, waits for its "ready http://127.0.0.1:PORT"
// line and returns a *Node whose URL is the HTTP endpoint. Stop (or closing the
// test process: the launcher exits when its stdin closes) shuts it down and
// removes the data.
//
// Typical use in a test:
//
//	node := opensearch.StartTest(t, opensearch.Options{})
//	client, _ := opensearchapi.NewClient(opensearchapi.Config{
//		Client: opensearch.Config{Addresses: []string{node.URL()}},
//	})
//
// StartCluster (StartTestCluster in tests) starts several such nodes in
// parallel as one cluster (zen discovery, fixed transport ports seeding each
// other, every node an initial cluster manager and a data node), so a test
// can kill one data node (Node.Halt with SIGKILL) and watch the others carry
// on.
//
// Java 17 and Maven 3.8+ must be on PATH (or JAVA_HOME); the first build
// downloads the jars into ~/.m2. README.md in this directory has timings
// and pitfalls.
package opensearch
