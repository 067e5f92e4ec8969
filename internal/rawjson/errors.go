package rawjson

import (
	"errors"
	"strconv"
)

// ErrMalformed is wrapped by every error of this package: the input is not
// a JSON object as the scanner requires.
var ErrMalformed = errors.New("malformed JSON")

// SyntaxError says what is wrong and where. Its message leaves out
// ErrMalformed's text, as callers wrap it with their own sentinel
// (fmt.Errorf("%w: %w", ErrSomething, err)), which would repeat it.
type SyntaxError struct {
	Msg string
	// Offset is the byte offset in the scanned input, or -1 when the
	// input was a value on its own (String).
	Offset int
}

func (e *SyntaxError) Error() string {
	if e.Offset < 0 {
		return e.Msg
	}
	return e.Msg + " at offset " + strconv.Itoa(e.Offset)
}

// Unwrap makes errors.Is(err, ErrMalformed) hold.
func (e *SyntaxError) Unwrap() error { return ErrMalformed }

func syntax(msg string, off int) error { return &SyntaxError{Msg: msg, Offset: off} }
