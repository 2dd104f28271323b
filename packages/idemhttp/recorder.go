package idemhttp

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// recorder is the http.ResponseWriter the handler of a claimed key writes to. It holds the whole answer in
// memory until the answer is stored, so that a client never sees an answer a retry could not replay.
type recorder struct {
	header  http.Header // what the handler is editing
	final   http.Header // a copy taken when the status is written: later edits do not count, as in net/http
	status  int         // 0 until written
	body    bytes.Buffer
	written bool
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

// Header returns the header map the handler edits until it writes the status.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records the status; the first final one counts, as with net/http. An informational (1xx)
// status is dropped: sent early it would be a part of the answer a replay cannot repeat.
func (r *recorder) WriteHeader(status int) {
	if status < 100 || status > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", status)) // what net/http does
	}
	if r.written || status < 200 {
		return
	}
	r.status, r.written = status, true
	r.final = r.header.Clone()
}

// Write appends to the held body, writing the status 200 first if none was.
func (r *recorder) Write(b []byte) (int, error) {
	if !r.written {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}

// Flush does nothing: the answer is held whole until it is stored, so there is nothing to send early. It is
// here so that handlers that stream (and check for http.Flusher) still work, their answer arriving at the end.
func (r *recorder) Flush() {}

// result is the answer as the handler left it: a handler that wrote nothing answered 200 with no body.
func (r *recorder) result() (int, http.Header) {
	if !r.written {
		r.WriteHeader(http.StatusOK)
	}
	return r.status, r.final
}

// storedHeaders is the answer's allow-listed headers, as idem_finish stores them: one string per name, several
// values joined with ", ".
func storedHeaders(header http.Header, allow map[string]string) map[string]string {
	stored := map[string]string{}
	for name, values := range header {
		if as, ok := allow[http.CanonicalHeaderKey(name)]; ok && len(values) > 0 {
			stored[as] = strings.Join(values, ", ")
		}
	}
	return stored
}
