package rawjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// MaxDepth bounds how deeply a document's objects and arrays nest; the
// top-level object is level 1. Every byte of an object comes from a
// collector, which the hub does not trust, so the bound is the hub's, not
// the apiserver's (encoding/json allows 10000): real Kubernetes objects nest
// a few dozen levels at most (the deepest are CRDs' schemas), while the
// decoders that read stored objects back (encoding/json for Tables,
// browsers' JSON.parse in the console, OpenSearch's parser, which refuses
// past 1000 by default) recurse once per level. 512 keeps them all far
// inside their limits and refuses nothing a real cluster writes.
const MaxDepth = 512

// MaxSize bounds the size of a document, in bytes: the largest message a
// cluster's stream carries (stream.MaxPayload, 4 MiB, which also holds the
// event around the object), so it refuses nothing the transport delivered
// and bounds what one object can cost a reader that never came through a
// stream (objects stored before this check).
const MaxSize = 4 << 20

// SkipSpace returns the offset of the first byte at or after i that is not
// JSON white space.
func SkipSpace(b []byte, i int) int {
	// The apiserver writes no white space: one comparison settles the
	// common case.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 marks, in the top bit of each byte of w (eight bytes read
// little-endian), the bytes that end or escape a string or need a check:
// a quote, a backslash, a control byte or a byte past ASCII. A test may
// also mark bytes above a marked one (its borrow runs on), never one
// below: the lowest mark is exact, which is all the caller needs.
func special8(w uint64) uint64 {
	q := w ^ (ones * '"')
	s := w ^ (ones * '\\')
	m := (q - ones) &^ q
	m |= (s - ones) &^ s
	m |= w - ones*0x20 // a byte below 0x20 borrows into its top bit
	m |= w             // a byte past ASCII has its top bit set
	return m & highs
}

// skipString returns the offset just past the string starting at
// b[i] == '"', checking it by the JSON grammar: escapes, no raw control
// bytes, and valid UTF-8. Most of an object's bytes are inside strings, so
// it looks at eight bytes at a time and jumps to the first that matters.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		for j+8 <= len(b) {
			if m := special8(binary.LittleEndian.Uint64(b[j:])); m != 0 {
				j += bits.TrailingZeros64(m) >> 3
				break
			}
			j += 8
		}
		if j >= len(b) {
			return 0, syntax("unterminated string", i)
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			n, err := escape(b, j)
			if err != nil {
				return 0, err
			}
			j += n
		case c < 0x20:
			return 0, syntax(fmt.Sprintf("control character %#02x in string", c), j)
		case c < utf8.RuneSelf:
			j++ // only in the last eight bytes of b
		default:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n <= 1 {
				return 0, syntax("invalid UTF-8 in string", j)
			}
			j += n
		}
	}
}

// escape returns the length of the escape sequence at b[j] == '\\'.
func escape(b []byte, j int) (int, error) {
	if j+1 >= len(b) {
		return 0, syntax("unterminated string", j)
	}
	switch b[j+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
		if j+6 > len(b) {
			return 0, syntax("invalid \\u escape", j)
		}
		for _, h := range b[j+2 : j+6] {
			if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
				return 0, syntax("invalid \\u escape", j)
			}
		}
		return 6, nil
	}
	return 0, syntax(fmt.Sprintf("invalid escape %q in string", b[j:j+2]), j)
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	return 0, syntax("invalid literal", i)
}

// skipNumber follows the JSON number grammar:
// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func skipNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	case i == start:
		return 0, syntax(fmt.Sprintf("value expected, got %q", b[i]), i)
	default:
		return 0, syntax("invalid number", start)
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, syntax("invalid number", start)
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, syntax("invalid number", start)
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// stack holds which open containers are objects. Kubernetes objects nest
// a dozen levels at most, so a word of bits holds them without allocating.
type stack struct {
	depth int
	bits  uint64
	more  []bool // levels past 64
}

func (s *stack) push(obj bool) {
	if s.depth < 64 {
		if obj {
			s.bits |= 1 << s.depth
		} else {
			s.bits &^= 1 << s.depth
		}
	} else {
		s.more = append(s.more, obj)
	}
	s.depth++
}

func (s *stack) pop() {
	s.depth--
	if s.depth >= 64 {
		s.more = s.more[:len(s.more)-1]
	}
}

// inObject reports whether the innermost open container is an object.
func (s *stack) inObject() bool {
	if s.depth > 64 {
		return s.more[len(s.more)-1]
	}
	return s.bits&(1<<(s.depth-1)) != 0
}

// SkipValue returns the offset just past the JSON value at or after b[i]
// (leading white space is skipped), checking all of it by the JSON
// grammar, nested objects and arrays included, with MaxDepth counted as
// for a member of a top-level object.
func SkipValue(b []byte, i int) (int, error) { return skipValue(b, i, 1) }

// skipValue is SkipValue for a value inside outer open containers.
func skipValue(b []byte, i, outer int) (int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) {
		return 0, syntax("value expected", i)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		return skipNested(b, i, outer)
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	return skipNumber(b, i)
}

// skipNested returns the offset just past the object or array at b[i],
// inside outer open containers. It walks the grammar with an explicit
// stack, not recursion, so a hostile depth costs bits, not goroutine stack.
func skipNested(b []byte, i, outer int) (int, error) {
	var st stack
	j := i
	var err error
	for {
		// A value is expected at b[j].
		j = SkipSpace(b, j)
		if j >= len(b) {
			return 0, syntax("value expected", j)
		}
		switch c := b[j]; c {
		case '{', '[':
			if outer+st.depth+1 > MaxDepth {
				return 0, syntax(fmt.Sprintf("nested deeper than %d levels", MaxDepth), j)
			}
			st.push(c == '{')
			j = SkipSpace(b, j+1)
			if j < len(b) && b[j] == c+2 { // '}' is '{'+2, ']' is '['+2
				st.pop()
				j++
				break
			}
			if c == '{' {
				if j, err = objectKey(b, j); err != nil {
					return 0, err
				}
			}
			continue
		case '"':
			j, err = skipString(b, j)
		case 't':
			j, err = literal(b, j, "true")
		case 'f':
			j, err = literal(b, j, "false")
		case 'n':
			j, err = literal(b, j, "null")
		default:
			j, err = skipNumber(b, j)
		}
		if err != nil {
			return 0, err
		}
		// A value ended at b[j]: close containers until one goes on.
		for {
			if st.depth == 0 {
				return j, nil
			}
			j = SkipSpace(b, j)
			if j >= len(b) {
				return 0, syntax("unterminated object or array", i)
			}
			c, obj := b[j], st.inObject()
			if c == ',' {
				j++
				if obj {
					if j, err = objectKey(b, SkipSpace(b, j)); err != nil {
						return 0, err
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				st.pop()
				j++
				continue
			}
			if obj {
				return 0, syntax(fmt.Sprintf("',' or '}' expected, got %q", c), j)
			}
			return 0, syntax(fmt.Sprintf("',' or ']' expected, got %q", c), j)
		}
	}
}

// objectKey reads `"key" :` at b[j] (no leading space) and returns the
// offset just past the colon.
func objectKey(b []byte, j int) (int, error) {
	if j >= len(b) || b[j] != '"' {
		return 0, syntax("object key expected", j)
	}
	j, err := skipString(b, j)
	if err != nil {
		return 0, err
	}
	if j = SkipSpace(b, j); j >= len(b) || b[j] != ':' {
		return 0, syntax("':' expected after an object key", j)
	}
	return j + 1, nil
}

// Check reports whether obj is one JSON object, valid by the whole JSON
// grammar (RFC 8259) in valid UTF-8, with nothing but white space after it,
// at most MaxSize bytes and MaxDepth levels: what Labels and ObjectMembers
// check, without reading anything.
func Check(obj []byte) error {
	if err := checkSize(obj); err != nil {
		return err
	}
	end, err := EachMember(obj, 0, func(m Member) (int, error) {
		return SkipValue(obj, m.ValueStart)
	})
	if err != nil {
		return err
	}
	return checkEnd(obj, end)
}

func checkSize(obj []byte) error {
	if len(obj) > MaxSize {
		return syntax(fmt.Sprintf("object of %d bytes is larger than %d", len(obj), MaxSize), MaxSize)
	}
	return nil
}

func checkEnd(obj []byte, end int) error {
	if i := SkipSpace(obj, end); i != len(obj) {
		return syntax("trailing data after the object", i)
	}
	return nil
}

// String decodes a JSON string value, or null as "". Values without
// escapes are taken verbatim; the few with escapes go through
// encoding/json, which also checks them.
func String(v []byte) (string, error) {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	if string(v) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", &SyntaxError{Msg: err.Error(), Offset: -1}
	}
	return s, nil
}
