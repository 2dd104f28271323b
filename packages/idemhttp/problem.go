package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problem is an RFC 9457 body. The field order is the one all five packages write.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`

	retryAfter int // the Retry-After header's seconds: 0 for none, retryAfterLease for the claim's own
}

// retryAfterLease is the Retry-After of a problem whose wait is the rest of the first attempt's lease.
const retryAfterLease = -1

// The answers the middleware makes itself, by code: contract/problems.json, which contract_test.go compares them with.
var problems = map[string]problem{
	"key-missing":         {Status: http.StatusBadRequest, Detail: "this request needs an Idempotency-Key header"},
	"key-malformed":       {Status: http.StatusBadRequest, Detail: "the Idempotency-Key must be one field of 1 to 255 characters, bare or as a quoted string"},
	"body-unreadable":     {Status: http.StatusBadRequest, Detail: "the request body could not be read"},
	"request-in-progress": {Status: http.StatusConflict, Detail: "a request with this Idempotency-Key is still running: retry after Retry-After seconds", retryAfter: retryAfterLease},
	"lease-lost":          {Status: http.StatusConflict, Detail: "this request ran past its claim and another request took the key over: retry to get that one's answer", retryAfter: 1},
	"body-too-large":      {Status: http.StatusRequestEntityTooLarge, Detail: "the request body is larger than this server accepts; nothing was claimed"},
	"key-reused":          {Status: http.StatusUnprocessableEntity, Detail: "this Idempotency-Key was used with another request"},
	"scope-missing":       {Status: http.StatusInternalServerError, Detail: "the server could not tell whose request this is"},
	"store-failed":        {Status: http.StatusInternalServerError, Detail: "the answer could not be stored: retry later with the same Idempotency-Key"},
	"store-unavailable":   {Status: http.StatusServiceUnavailable, Detail: "the idempotency store could not be reached: nothing was done", retryAfter: 1},
	"commit-failed":       {Status: http.StatusServiceUnavailable, Detail: "the request's changes could not be committed: nothing was done, retry with the same Idempotency-Key", retryAfter: 1},
	"commit-unknown":      {Status: http.StatusServiceUnavailable, Detail: "the request's changes may or may not have been committed: retry with the same Idempotency-Key to learn which", retryAfter: 1},
}

// titles are RFC 9110's reason phrases, which all five packages write. Go 1.19's http.StatusText still has
// RFC 7231's names for 413 and 422 ("Request Entity Too Large", "Unprocessable Entity").
var titles = map[int]string{
	http.StatusBadRequest:            "Bad Request",
	http.StatusConflict:              "Conflict",
	http.StatusRequestEntityTooLarge: "Content Too Large",
	http.StatusUnprocessableEntity:   "Unprocessable Content",
	http.StatusInternalServerError:   "Internal Server Error",
	http.StatusServiceUnavailable:    "Service Unavailable",
}

// problemBody is the JSON of the problem named code.
func problemBody(code string) []byte {
	p, ok := problems[code]
	if !ok {
		panic("idemhttp: unknown problem " + code) // a bug here, not a request's fault
	}
	p.Type, p.Title, p.Code = "about:blank", titles[p.Status], code
	body, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings and an int always marshal
	}
	return body
}

// writeProblem answers the problem named code, with the Retry-After of its entry.
func writeProblem(w http.ResponseWriter, code string) {
	sendProblem(w, code, problems[code].retryAfter)
}

// writeInProgress answers request-in-progress, whose Retry-After is the rest of the first attempt's lease: at least
// 1, since 0 (a lease in its last second) would ask for a retry storm.
func writeInProgress(w http.ResponseWriter, leaseRest int) {
	sendProblem(w, "request-in-progress", max(leaseRest, 1))
}

// sendProblem answers the problem named code; retryAfter > 0 adds Retry-After.
func sendProblem(w http.ResponseWriter, code string, retryAfter int) {
	body := problemBody(code)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(problems[code].Status)
	_, _ = w.Write(body) // the client may be gone: nothing left to do about it
}
