package client

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// alwaysRendered are the list fields a coordinator's document (one with
// coordinator_id) renders even when empty: scripts read them without
// checking for the key. A document the CLI built (a stopped Domain) has
// only what it sets.
var alwaysRendered = map[protoreflect.FullName]bool{
	"lazaret.v1.DomainStatus.sessions":         true,
	"lazaret.v1.NetworkStatus.forwarded_ports": true,
}

// MarshalStatusJSON renders state documents as `lazaret status --json`
// prints them: a JSON array (null when there is none) of protojson
// objects under the proto field names, 64-bit integers as JSON numbers
// (protojson writes them as strings), keys sorted, indented by two spaces,
// with a final newline.
func MarshalStatusJSON(docs []*lv1.DomainStatus) ([]byte, error) {
	var out []any
	for _, d := range docs {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(d)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v map[string]any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if err := numbers(d.ProtoReflect().Descriptor(), v, d.CoordinatorId != nil); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// numbers rewrites, in obj (protojson's rendering of a message of type
// md), every 64-bit integer from its JSON string to a JSON number and adds
// (when always) the empty always-rendered lists.
func numbers(md protoreflect.MessageDescriptor, obj map[string]any, always bool) error {
	if md.FullName().Parent() == "google.protobuf" {
		return nil // well-known types have their own JSON forms
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := string(fd.Name())
		v, ok := obj[name]
		if !ok {
			if always && fd.IsList() && alwaysRendered[fd.FullName()] {
				obj[name] = []any{}
			}
			continue
		}
		var err error
		switch {
		case fd.IsList():
			l, _ := v.([]any)
			for j := range l {
				if l[j], err = value(fd, l[j], always); err != nil {
					return err
				}
			}
		case fd.IsMap():
			m, _ := v.(map[string]any)
			for k := range m {
				if m[k], err = value(fd.MapValue(), m[k], always); err != nil {
					return err
				}
			}
		default:
			if obj[name], err = value(fd, v, always); err != nil {
				return err
			}
		}
	}
	return nil
}

// value is v, one rendered value of field fd, with 64-bit integers as
// numbers.
func value(fd protoreflect.FieldDescriptor, v any, always bool) (any, error) {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("status JSON: %s is %T, not a string", fd.FullName(), v)
		}
		return json.Number(s), nil
	case protoreflect.MessageKind:
		if m, ok := v.(map[string]any); ok {
			return v, numbers(fd.Message(), m, always)
		}
	}
	return v, nil
}
