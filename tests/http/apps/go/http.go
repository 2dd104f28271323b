package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"net/http"
	"regexp"
	"strings"
)

type tenantKey struct{}

func tenantOf(ctx context.Context) string {
	tenant, _ := ctx.Value(tenantKey{}).(string)
	return tenant
}

var bearer = regexp.MustCompile(`^Bearer ([A-Za-z0-9_-]{1,64})$`)

// authenticate stands in for real authentication: the tenant is the bearer token. It runs before the
// middleware, whose scope is the tenant.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := bearer.FindStringSubmatch(r.Header.Get("Authorization"))
		if m == nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeProblem(w, http.StatusUnauthorized, "unauthenticated", "send Authorization: Bearer followed by the tenant")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, m[1])))
	})
}

// recovering turns a panic into a 500, as most Go services do: idemhttp has released the key by then (the
// panic went through it), so the client's retry runs again. http.ErrAbortHandler keeps its meaning.
func recovering(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Printf("panic: %s %s: %v", r.Method, r.URL.Path, p)
				writeProblem(w, http.StatusInternalServerError, "internal-error", "the server failed")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// writeProblem answers the app's own problem+json, in the middleware's field order.
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	title := http.StatusText(status)
	if status == http.StatusUnprocessableEntity {
		title = "Unprocessable Content" // RFC 9110's phrase, as the middleware writes it
	}
	write(w, status, "application/problem+json", struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}{"about:blank", title, status, detail, code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	write(w, status, "application/json", v)
}

func write(w http.ResponseWriter, status int, contentType string, v any) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // "> 0", not "\u003e 0": this is no HTML page
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	w.Write(bytes.TrimSuffix(body.Bytes(), []byte("\n")))
}

// lastSegment is what follows "/payments/" in a path, "" when there is nothing or more segments.
func lastSegment(path string) string {
	rest := strings.TrimPrefix(path, "/payments/")
	if rest == path || strings.Contains(rest, "/") {
		return ""
	}
	return rest
}
