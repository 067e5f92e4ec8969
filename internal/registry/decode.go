package registry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode parses exactly one ResourceRegistry from YAML or JSON. It checks the
// structure (apiVersion, kind, unknown or duplicate fields, value types,
// required keys), not the semantics: call Validate on the result.
//
// Input holding several documents is rejected rather than truncated, so a
// second registry in the same file is never silently ignored; use DecodeAll
// for multi-document YAML.
func Decode(data []byte) (*ResourceRegistry, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	switch len(docs) {
	case 0:
		return nil, fmt.Errorf("%w: no document found", ErrDecode)
	case 1:
		return docs[0].decode()
	default:
		return nil, fmt.Errorf("%w: found %d documents, want exactly one (use DecodeAll)", ErrDecode, len(docs))
	}
}

// DecodeAll parses every ResourceRegistry in multi-document YAML ("---"
// separated) or a single JSON object. Blank and comment-only documents are
// skipped. It reports the errors of every bad document at once, each
// prefixed with its 1-based position, and then returns no registries: applying
// half of a file is worse than applying none.
func DecodeAll(data []byte) ([]*ResourceRegistry, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	out := make([]*ResourceRegistry, 0, len(docs))
	var errs []error
	for _, d := range docs {
		reg, err := d.decode()
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", d.index, err))
			continue
		}
		out = append(out, reg)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// document is one non-empty YAML document converted to JSON, or the error
// converting it.
type document struct {
	index int
	json  []byte
	err   error
}

func (d document) decode() (*ResourceRegistry, error) {
	if d.err != nil {
		return nil, d.err
	}
	return decodeJSON(d.json)
}

func splitDocuments(data []byte) ([]document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []document
	for index := 1; ; index++ {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: reading document %d: %w", ErrDecode, index, err)
		}
		// Strict conversion rejects duplicate keys, which plain YAML decoding
		// would resolve silently by keeping the last one.
		j, err := yaml.YAMLToJSONStrict(chunk)
		if err != nil {
			docs = append(docs, document{index: index, err: fmt.Errorf("%w: %w", ErrDecode, err)})
			continue
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		docs = append(docs, document{index: index, json: j})
	}
}

func decodeJSON(data []byte) (*ResourceRegistry, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return nil, fmt.Errorf("%w: document must be an object with apiVersion, kind, metadata and spec", ErrDecode)
	}
	// Check the type before the body: a Deployment fed in by mistake should
	// say "wrong kind", not list every Deployment field as unknown.
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &tm); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}
	if err := checkType(tm.APIVersion, tm.Kind); err != nil {
		return nil, err
	}

	r := &ResourceRegistry{}
	// sigs.k8s.io/json, unlike encoding/json, matches keys case-sensitively
	// and reports every unknown field with its full path at once.
	strictErrs, err := sigsjson.UnmarshalStrict(data, r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDecode, err)
	}

	var problems []string
	sentinels := []error{ErrDecode}
	for _, e := range strictErrs {
		problems = append(problems, e.Error())
		if strings.HasPrefix(e.Error(), "unknown field") && len(sentinels) == 1 {
			sentinels = append(sentinels, ErrUnknownField)
		}
	}
	problems = append(problems, missingRequired(data)...)
	if len(problems) > 0 {
		return nil, &multiError{
			msg:  ErrDecode.Error() + ": " + strings.Join(problems, "; "),
			errs: sentinels,
		}
	}
	return r, nil
}

func checkType(apiVersion, kind string) error {
	var problems []string
	switch apiVersion {
	case KarmadaAPIVersion, APIVersion:
	case "":
		problems = append(problems, fmt.Sprintf("apiVersion is required (want %s or %s)", KarmadaAPIVersion, APIVersion))
	default:
		problems = append(problems, fmt.Sprintf("apiVersion %q is not supported (want %s or %s)", apiVersion, KarmadaAPIVersion, APIVersion))
	}
	switch kind {
	case Kind:
	case "":
		problems = append(problems, fmt.Sprintf("kind is required (want %s)", Kind))
	default:
		problems = append(problems, fmt.Sprintf("kind %q is not supported (want %s)", kind, Kind))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnsupportedType, strings.Join(problems, "; "))
}

// missingRequired reports keys the Karmada CRD schema marks required but a
// Go zero value cannot tell apart from "absent". targetCluster matters most:
// left out, it would silently mean every cluster.
func missingRequired(data []byte) []string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil // strict decoding already accepted data as an object
	}
	spec, ok := top["spec"]
	if !ok || isNull(spec) {
		return []string{`missing required field "spec"`}
	}
	var specFields map[string]json.RawMessage
	if err := json.Unmarshal(spec, &specFields); err != nil {
		return nil
	}
	if tc, ok := specFields["targetCluster"]; !ok || isNull(tc) {
		return []string{`missing required field "spec.targetCluster" (write "targetCluster: {}" to select every cluster)`}
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// multiError carries one message and several sentinels, so a single decode
// error is both ErrDecode and, when it applies, ErrUnknownField.
type multiError struct {
	msg  string
	errs []error
}

func (e *multiError) Error() string   { return e.msg }
func (e *multiError) Unwrap() []error { return e.errs }
