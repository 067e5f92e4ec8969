package benchutil

import (
	"fmt"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// CountArray adds the number of elements of the JSON array at b[i] to n,
// checking each element, and returns the offset just past the array: a
// list answer's items counted without decoding them, so a benchmark's
// client parse stays a small part of what it times.
func CountArray(b []byte, i int, n *int) (int, error) {
	if i >= len(b) || b[i] != '[' {
		return 0, fmt.Errorf("array expected at offset %d", i)
	}
	if i = rawjson.SkipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := rawjson.SkipValue(b, i)
		if err != nil {
			return 0, err
		}
		*n++
		switch i = rawjson.SkipSpace(b, end); {
		case i >= len(b):
			return 0, fmt.Errorf("unterminated array at offset %d", i)
		case b[i] == ']':
			return i + 1, nil
		case b[i] != ',':
			return 0, fmt.Errorf("',' or ']' expected at offset %d, got %q", i, b[i])
		}
		i = rawjson.SkipSpace(b, i+1)
	}
}
