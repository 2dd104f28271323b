package idemhttp

import (
	"net/http/httptest"
	"testing"
)

// The bodies exactly, field order included: the three packages answer the same bytes.
func TestProblemBodies(t *testing.T) {
	for code, want := range map[string]string{
		"key-missing":         `{"type":"about:blank","title":"Bad Request","status":400,"detail":"this request needs an Idempotency-Key header","code":"key-missing"}`,
		"key-malformed":       `{"type":"about:blank","title":"Bad Request","status":400,"detail":"the Idempotency-Key must be one field of 1 to 255 characters, bare or as a quoted string","code":"key-malformed"}`,
		"request-in-progress": `{"type":"about:blank","title":"Conflict","status":409,"detail":"a request with this Idempotency-Key is still running: retry after Retry-After seconds","code":"request-in-progress"}`,
		"lease-lost":          `{"type":"about:blank","title":"Conflict","status":409,"detail":"this request ran past its claim and another request took the key over: retry to get that one's answer","code":"lease-lost"}`,
		"key-reused":          `{"type":"about:blank","title":"Unprocessable Content","status":422,"detail":"this Idempotency-Key was used with another request","code":"key-reused"}`,
		"scope-missing":       `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the server could not tell whose request this is","code":"scope-missing"}`,
		"store-failed":        `{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"the answer could not be stored: retry later with the same Idempotency-Key","code":"store-failed"}`,
		"store-unavailable":   `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the idempotency store could not be reached: nothing was done","code":"store-unavailable"}`,
		"commit-failed":       `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the request's changes could not be committed: nothing was done, retry with the same Idempotency-Key","code":"commit-failed"}`,
		"commit-unknown":      `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the request's changes may or may not have been committed: retry with the same Idempotency-Key to learn which","code":"commit-unknown"}`,
		"body-unreadable":     `{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request body could not be read","code":"body-unreadable"}`,
		"body-too-large":      `{"type":"about:blank","title":"Content Too Large","status":413,"detail":"the request body is larger than this server accepts; nothing was claimed","code":"body-too-large"}`,
	} {
		if _, ok := titles[problems[code].Status]; !ok {
			t.Errorf("%s: no title for %d", code, problems[code].Status)
		}
		if got := string(problemBody(code)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", code, got, want)
		}
	}
}

func TestWriteProblem(t *testing.T) {
	w := httptest.NewRecorder()
	writeProblem(w, "request-in-progress", 3)
	if w.Code != 409 || w.Header().Get("Content-Type") != "application/problem+json" ||
		w.Header().Get("Retry-After") != "3" || w.Header().Get("Content-Length") != "180" {
		t.Errorf("got %d %v", w.Code, w.Header())
	}
	w = httptest.NewRecorder()
	writeProblem(w, "key-reused", 0)
	if w.Code != 422 || w.Header().Get("Retry-After") != "" {
		t.Errorf("got %d %v", w.Code, w.Header())
	}
}
