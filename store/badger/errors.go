package badger

import (
	"errors"
	"fmt"

	"github.com/fleetview/fleetview/internal/query"
)

// errNoRelations answers what needs the relationship index when the store
// keeps none (Options.NoRelations; the hub's --relations is off).
var errNoRelations = fmt.Errorf("%w: the relationship index (fleetview serve/up --relations)", query.ErrNotKept)

// errOldRevision is a history revision written before reverse deltas
// (forward patches): not read; retention removes it with the window.
var errOldRevision = fmt.Errorf("history revision of an earlier format (forward patches), removed with the retention window: %w", errCorrupt)

// errUIDRead stops recordUID's walk of a record's metadata at the uid;
// never returned.
var errUIDRead = errors.New("uid read")

// errTailCopied stops applyReverse's walk of a document's top level once
// the rest is copied as it is (compactTail); never returned.
var errTailCopied = errors.New("tail copied")

// errBadOption is an Options field out of its range; the message names
// the field.
var errBadOption = errors.New("invalid store option")
