// Package service tests the query service of a real hub over real member
// clusters through gRPC and its REST gateway (grpc-gateway): every List
// filter, readiness, bad input, snapshot paging under churn, watch resume
// without gap or duplicate, search and the cluster inventory.
package service
