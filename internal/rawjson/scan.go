package rawjson

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// maxDepth is encoding/json's nesting limit (and so the apiserver's): a
// document the standard decoder refuses is refused here too, and a hostile
// one cannot make the bracket stack grow without bound.
const maxDepth = 10000

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

// skipString returns the offset just past the string starting at
// b[i] == '"'. Most of an object's bytes are inside strings, so it jumps
// from quote to quote (bytes.IndexByte is vectorised) and counts the
// backslashes before each: a quote after an odd number of them is escaped.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, syntax("unterminated string", i)
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
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

// memberName reads `"key" :` at b[i] (no leading space) and returns the
// key's closing quote's offset + 1 and the offset of the value (after
// white space).
func memberName(b []byte, i int) (ke, vs int, err error) {
	if i >= len(b) || b[i] != '"' {
		return 0, 0, syntax("object key expected", i)
	}
	if ke, err = skipString(b, i); err != nil {
		return 0, 0, err
	}
	if ke < len(b) && b[ke] == ':' {
		return ke, SkipSpace(b, ke+1), nil
	}
	j := SkipSpace(b, ke)
	if j >= len(b) || b[j] != ':' {
		return 0, 0, syntax("':' expected after an object key", j)
	}
	return ke, SkipSpace(b, j+1), nil
}

// SkipValue returns the offset just past the JSON value at or after b[i]
// (leading white space is skipped). Objects and arrays are checked
// throughout: matching brackets, keys, colons, commas and the grammar of
// literals and numbers; strings only for where they end.
func SkipValue(b []byte, i int) (int, error) {
	// One loop with gotos rather than a function per grammar rule: this
	// walks every value of every object the collector and materializer
	// see, and calls per key or value were a sixth of its cost.
	var st stack
	obj := false // the innermost open container is an object
	var err error
value:
	i = SkipSpace(b, i)
	if i >= len(b) {
		return 0, syntax("value expected", i)
	}
	switch b[i] {
	case '"':
		if i, err = skipString(b, i); err != nil {
			return 0, err
		}
	case '{':
		if st.depth >= maxDepth {
			return 0, syntax("nested too deeply", i)
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		st.push(true)
		obj = true
		goto key
	case '[':
		if st.depth >= maxDepth {
			return 0, syntax("nested too deeply", i)
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			i++
			break
		}
		st.push(false)
		obj = false
		goto value
	case 't':
		if i, err = literal(b, i, "true"); err != nil {
			return 0, err
		}
	case 'f':
		if i, err = literal(b, i, "false"); err != nil {
			return 0, err
		}
	case 'n':
		if i, err = literal(b, i, "null"); err != nil {
			return 0, err
		}
	default:
		if i, err = skipNumber(b, i); err != nil {
			return 0, err
		}
	}
	// A value ended: close containers until one continues.
	for st.depth > 0 {
		if i >= len(b) {
			return 0, syntax("unterminated object or array", i)
		}
		switch c := b[i]; {
		case c == ',':
			i = SkipSpace(b, i+1)
			if obj {
				goto key
			}
			goto value
		case obj && c == '}' || !obj && c == ']':
			i++
			st.pop()
			if st.depth > 0 {
				obj = st.inObject()
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i = SkipSpace(b, i)
		case obj:
			return 0, syntax(fmt.Sprintf("',' or '}' expected, got %q", c), i)
		default:
			return 0, syntax(fmt.Sprintf("',' or ']' expected, got %q", c), i)
		}
	}
	return i, nil
key:
	if i >= len(b) || b[i] != '"' {
		return 0, syntax("object key expected", i)
	}
	if i, err = skipString(b, i); err != nil {
		return 0, err
	}
	if i >= len(b) || b[i] != ':' {
		if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
			return 0, syntax("':' expected after an object key", i)
		}
	}
	i++
	goto value
}

// Member is one member of a JSON object, as offsets into the scanned input.
type Member struct {
	// Key is the raw key between its quotes, escapes not decoded: the
	// members the callers look for are plain ASCII names.
	Key []byte
	// Start and End span `"key": value`.
	Start, End int
	// ValueStart and ValueEnd span the value alone.
	ValueStart, ValueEnd int
}

// EachMember reads the object at or after b[i] and returns the offset just
// past it. It calls f with each member, whose ValueEnd and End are not set
// yet: f reads the value in place (with SkipValue, or EachMember for an
// object it looks into, so that value is scanned once) and returns the
// offset just past it.
func EachMember(b []byte, i int, f func(m Member) (int, error)) (int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, syntax("object expected", i)
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		ke, vs, err := memberName(b, i)
		if err != nil {
			return 0, err
		}
		if i, err = f(Member{Key: b[i+1 : ke-1], Start: i, ValueStart: vs}); err != nil {
			return 0, err
		}
		if i, err = nextMember(b, i); err != nil {
			return 0, err
		}
		if i < 0 {
			return -i - 1, nil
		}
	}
}

// nextMember reads what follows a member's value: a comma (it returns the
// offset of the next key) or the closing brace (it returns -1 minus the
// offset just past the object).
func nextMember(b []byte, i int) (int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) {
		return 0, syntax("unterminated object", i)
	}
	switch b[i] {
	case ',':
		return SkipSpace(b, i+1), nil
	case '}':
		return -(i + 1) - 1, nil
	}
	return 0, syntax(fmt.Sprintf("',' or '}' expected, got %q", b[i]), i)
}

// Members appends the members of the object at or after b[i] to dst and
// returns them and the offset just past the object.
func Members(b []byte, i int, dst []Member) ([]Member, int, error) {
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return nil, 0, syntax("object expected", i)
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return dst, i + 1, nil
	}
	for {
		ke, vs, err := memberName(b, i)
		if err != nil {
			return nil, 0, err
		}
		m := Member{Key: b[i+1 : ke-1], Start: i, ValueStart: vs}
		if m.ValueEnd, err = SkipValue(b, vs); err != nil {
			return nil, 0, err
		}
		m.End = m.ValueEnd
		dst = append(dst, m)
		if i, err = nextMember(b, m.ValueEnd); err != nil {
			return nil, 0, err
		}
		if i < 0 {
			return dst, -i - 1, nil
		}
	}
}

// ObjectMembers is Members of a whole document: obj must be one object
// with nothing but white space after it.
func ObjectMembers(obj []byte, dst []Member) ([]Member, error) {
	dst, end, err := Members(obj, 0, dst)
	if err != nil {
		return nil, err
	}
	return dst, checkEnd(obj, end)
}

// Check reports whether obj is one object with nothing after it, as far
// as this package checks JSON (see the package comment).
func Check(obj []byte) error {
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return syntax("object expected", i)
	}
	end, err := SkipValue(obj, i)
	if err != nil {
		return err
	}
	return checkEnd(obj, end)
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
