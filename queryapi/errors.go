package queryapi

import "errors"

// errNoEpochs: a resourceVersion needs a stored epoch and this server has
// no JetStream to keep one (a unit test's query service).
var errNoEpochs = errors.New("no version epochs")
