package opensearch

import "errors"

// ErrConfig is returned for an unusable configuration.
var ErrConfig = errors.New("opensearch backend configuration")

// ErrRequest is returned for a request OpenSearch refused for good.
var ErrRequest = errors.New("opensearch request failed")
