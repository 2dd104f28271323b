package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"syscall"

	"github.com/idem-keys/idemhttp"
)

// Charge is the provider's record of one charge.
type Charge struct {
	ID         string `json:"id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	CustomerID string `json:"customer_id"`
}

// Provider is the payment provider's HTTP API. The idempotency key is our reference there, so a charge can
// always be found again, by a retry that recovers the key or by the reconciler.
type Provider struct {
	baseURL string
	client  *http.Client
}

// Charge returns the charge, or nil and the provider's status when it refused (503) or declined (402).
func (p *Provider) Charge(ctx context.Context, reference string, pay payment) (*Charge, int, error) {
	body, _ := json.Marshal(map[string]interface{}{
		"reference": reference, "amount": pay.Amount, "currency": pay.Currency, "customer_id": pay.CustomerID,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+"/charges", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return p.do(req)
}

// Lookup returns the charge made under reference, or nil if there is none.
func (p *Provider) Lookup(ctx context.Context, reference string) (*Charge, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		p.baseURL+"/charges?reference="+url.QueryEscape(reference), nil)
	if err != nil {
		return nil, err
	}
	ch, status, err := p.do(req)
	if err == nil && ch == nil && status != http.StatusNotFound {
		err = fmt.Errorf("provider lookup: status %d", status)
	}
	return ch, err
}

func (p *Provider) do(req *http.Request) (*Charge, int, error) {
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return nil, resp.StatusCode, nil
	}
	var ch Charge
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
		return nil, resp.StatusCode, err
	}
	return &ch, resp.StatusCode, nil
}

type payment struct {
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	CustomerID string `json:"customer_id"`
}

// Payments handles POST /payments behind the idemhttp middleware, which runs it at most once per key and
// stores its answer: 201 and 402 are final and replayed; a 503 (the provider refused: nothing was charged)
// releases the key; a 502 (maybe charged) leaves it unsettled, so that after its lease the next retry, or the
// reconciler, looks the charge up. A 400 for a bad body is an answer too, stored like any other.
type Payments struct {
	provider  *Provider
	testHooks bool
}

func (h *Payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var pay payment
	if err := json.NewDecoder(r.Body).Decode(&pay); err != nil || pay.Amount <= 0 || len(pay.Currency) != 3 ||
		pay.CustomerID == "" {
		writeJSON(w, http.StatusBadRequest, errorBody("amount (> 0), currency (3 letters) and customer_id are required"))
		return
	}
	// The middleware's context: not cancelled when the client hangs up, so a charge is never cut half-way.
	ctx := r.Context()
	attempt := idemhttp.FromContext(ctx)
	key := attempt.Key // our reference at the provider: a retry or the reconciler can always find the charge

	var ch *Charge
	if attempt.Recovered() {
		// The previous owner died somewhere between its claim and its finish: it may have charged already.
		var err error
		if ch, err = h.provider.Lookup(ctx, key); err != nil {
			log.Printf("provider lookup %q: %v", key, err)
			attempt.LeaveUnsettled() // still unknown: the next retry looks again
			writeJSON(w, http.StatusBadGateway, errorBody("payment provider unreachable"))
			return
		}
	}
	if ch == nil {
		h.crashIf(r, "before-charge")
		var status int
		var err error
		ch, status, err = h.provider.Charge(ctx, key, pay)
		switch {
		case err != nil:
			// Maybe charged, maybe not: the claim waits for the next retry or the reconciler.
			log.Printf("provider charge %q: %v", key, err)
			attempt.LeaveUnsettled()
			writeJSON(w, http.StatusBadGateway, errorBody("payment provider unreachable"))
			return
		case status == http.StatusPaymentRequired:
			writeJSON(w, http.StatusPaymentRequired, errorBody("card_declined")) // final: stored and replayed
			return
		case ch == nil && status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests:
			log.Printf("provider charge %q: status %d", key, status)
			attempt.LeaveUnsettled()
			writeJSON(w, http.StatusBadGateway, errorBody("payment provider failed"))
			return
		case ch == nil: // 503 or 429: the provider promises it charged nothing; 503 releases the key
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, errorBody("payment provider unavailable, nothing charged"))
			return
		}
		h.crashIf(r, "after-charge")
	}
	status, headers, body := paymentAnswer(ch)
	for name, value := range headers {
		w.Header().Set(name, value)
	}
	w.WriteHeader(status)
	w.Write(body)
}

// paymentAnswer is the answer to a successful payment, built from the provider's charge alone so the reconciler,
// which never saw the request, gives the same answer the handler would have.
func paymentAnswer(ch *Charge) (int, map[string]string, []byte) {
	body, _ := json.Marshal(map[string]interface{}{
		"charge_id": ch.ID, "amount": ch.Amount, "currency": ch.Currency, "customer_id": ch.CustomerID,
		"status": "succeeded",
	})
	headers := map[string]string{"Content-Type": "application/json", "Location": "/payments/" + ch.ID}
	return http.StatusCreated, headers, body
}

// crashIf lets the e2e harness kill the service at the worst moments, e.g. after the provider charged and
// before idem_finish. Only with IDEM_TEST_HOOKS=1.
func (h *Payments) crashIf(r *http.Request, moment string) {
	if h.testHooks && r.Header.Get("X-Test-Crash") == moment {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}
