package ax

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// decodePayload decodes job's payload into v (a pointer), for Handle. Its
// error is the attempt's error, which is stored plain in the job's errors,
// logged, sent to observers and shown by alerts, callbacks and the
// dashboard. encoding/json's errors quote the payload (`cannot unmarshal
// number 1234.56`, a time.Time field's `parsing time "1990-07-14"`): for a
// payload that was sealed (Config.Keys) that would store in the clear
// what the envelope hides. The error of a sealed payload therefore names
// the type, the field and the kind of mistake, never a value
// (withheldDecodeError); a plain payload keeps encoding/json's error.
func decodePayload[T any](job *Job, p *T) error {
	err := json.Unmarshal(job.Payload, p)
	if err == nil {
		return nil
	}
	if !job.sealed {
		return fmt.Errorf("decode %s payload into %T: %w", job.Kind, *p, err)
	}
	t := reflect.TypeFor[T]()
	return &withheldDecodeError{kind: job.Kind, into: t, detail: decodeDetail(job.Payload, t, err)}
}

// withheldDecodeError is the error of a sealed payload that did not
// decode: its text says where, and what kind of value was wrong, and it
// does not wrap encoding/json's error, whose fields hold the value.
type withheldDecodeError struct {
	kind   string
	into   reflect.Type
	detail string
}

func (e *withheldDecodeError) Error() string {
	return fmt.Sprintf("decode %s payload into %s: %s (the payload is encrypted: its values are withheld)", e.kind, e.into, e.detail)
}

// decodeDetail describes err, the error of decoding payload into v,
// without any of payload's values.
func decodeDetail(payload []byte, t reflect.Type, err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var invalid *json.InvalidUnmarshalError
	switch {
	case errors.As(err, &typeErr):
		// Value is "number 1234.56", "string", "bool", "array"...: keep
		// the JSON type only.
		what, _, _ := strings.Cut(typeErr.Value, " ")
		if typeErr.Field != "" {
			return fmt.Sprintf("field %q: cannot unmarshal a JSON %s into %s", typeErr.Field, what, typeErr.Type)
		}
		return fmt.Sprintf("cannot unmarshal a JSON %s into %s", what, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("invalid JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &invalid):
		return invalid.Error() // names a Go type only
	}
	// An UnmarshalJSON or UnmarshalText method failed (time.Time's
	// "parsing time ..."); its text may quote anything, and encoding/json
	// does not say which field it was: find the top-level field by
	// decoding each alone.
	detail := fmt.Sprintf("a value does not decode (%T)", err)
	if f := failingField(payload, t); f != "" {
		detail = fmt.Sprintf("field %q does not decode (%T)", f, err)
	}
	return detail
}

// failingField returns the name of the first top-level member of the
// JSON object payload that alone fails to decode into a new t, or "".
func failingField(payload []byte, t reflect.Type) string {
	var members map[string]json.RawMessage
	if json.Unmarshal(payload, &members) != nil {
		return ""
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		key, _ := json.Marshal(name)
		var one bytes.Buffer
		one.WriteByte('{')
		one.Write(key)
		one.WriteByte(':')
		one.Write(members[name])
		one.WriteByte('}')
		if json.Unmarshal(one.Bytes(), reflect.New(t).Interface()) != nil {
			return name
		}
	}
	return ""
}
