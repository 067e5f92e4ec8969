package rawjson

// PathValues appends to dst the raw bytes of every value at path in obj,
// a document Check accepts. path names object members, one per level; an
// array met on the way, or at the end, stands for each of its elements
// (nested arrays too), so the values of `spec.containers.image` are every
// container's image. A level that is not an object where a member is
// named, and a member that is absent, contribute nothing. Keys are
// compared decoded. The members around the path are stepped over, not
// decoded: a field selector reads a few values of each stored object.
func PathValues(obj []byte, path []string, dst [][]byte) ([][]byte, error) {
	if err := checkSize(obj); err != nil {
		return nil, err
	}
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, syntax("object expected", i)
	}
	end, err := pathValues(obj, i, path, 0, &dst)
	if err != nil {
		return nil, err
	}
	if err := checkEnd(obj, end); err != nil {
		return nil, err
	}
	return dst, nil
}

// pathValues reads the value at b[i] (no leading space), appends what
// path selects in it to dst, and returns the offset just past the value.
func pathValues(b []byte, i int, path []string, depth int, dst *[][]byte) (int, error) {
	// depth counts the containers around b[i], as skipValue's outer does.
	if depth >= MaxDepth {
		return 0, syntax("nested too deeply", i)
	}
	if i < len(b) && b[i] == '[' {
		return eachElement(b, i, func(j int) (int, error) { return pathValues(b, j, path, depth+1, dst) })
	}
	if len(path) == 0 {
		end, err := skipValue(b, i, depth)
		if err != nil {
			return 0, err
		}
		*dst = append(*dst, b[i:end])
		return end, nil
	}
	if i >= len(b) || b[i] != '{' {
		return skipValue(b, i, depth)
	}
	return EachMember(b, i, func(m Member) (int, error) {
		ok, err := keyIs(m, path[0])
		if err != nil {
			return 0, err
		}
		if !ok {
			return skipValue(b, m.ValueStart, depth+1)
		}
		return pathValues(b, m.ValueStart, path[1:], depth+1, dst)
	})
}

// eachElement reads the array at b[i] and calls f with the offset of each
// element (no leading space); f returns the offset just past it.
func eachElement(b []byte, i int, f func(j int) (int, error)) (int, error) {
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := f(i)
		if err != nil {
			return 0, err
		}
		if i = SkipSpace(b, end); i >= len(b) {
			return 0, syntax("unterminated array", i)
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, syntax("',' or ']' expected after an element", i)
		}
	}
}
