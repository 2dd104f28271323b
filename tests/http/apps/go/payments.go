package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/idem-keys/idemhttp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type payments struct {
	pool *pgxpool.Pool
	show http.Handler // GET /payments/<id>, behind the middleware or not
}

// payment is a row of the payments table as the API shows it.
type payment struct {
	ID         int64  `json:"id"`
	Tenant     string `json:"tenant"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	CustomerID string `json:"customer_id"`
}

// created is the answer to POST /payments: the payment, and the middleware's outcome for the request that
// answered (claimed or recovered; null with IDEM_OFF=1).
type created struct {
	payment
	Attempt *string `json:"attempt"`
}

var (
	currencyPattern = regexp.MustCompile(`^[A-Za-z]{3}$`)
	slowCustomer    = regexp.MustCompile(`^cus_slow_([0-9]{1,5})$`)
	crashCustomer   = regexp.MustCompile(`^cus_crash_after_write_([0-9]{1,5})$`)
)

// sleepFor sleeps the N ms of a customer id the pattern matches, when N <= 60000.
func sleepFor(pattern *regexp.Regexp, customerID string) {
	if m := pattern.FindStringSubmatch(customerID); m != nil {
		if ms, _ := strconv.Atoi(m[1]); ms <= 60000 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
	}
}

// parsePayment reads the body: amount an integer > 0, currency 3 letters, customer_id a non-empty string.
func parsePayment(r *http.Request) (*created, bool) {
	var in struct {
		Amount     json.RawMessage `json:"amount"`
		Currency   string          `json:"currency"`
		CustomerID string          `json:"customer_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		return nil, false
	}
	// The literal itself: "1000" (a string), 10.5 and 1e3 are not integers here.
	amount, err := strconv.ParseInt(string(in.Amount), 10, 64)
	if err != nil || amount <= 0 || !currencyPattern.MatchString(in.Currency) || in.CustomerID == "" {
		return nil, false
	}
	return &created{payment: payment{Amount: amount, Currency: in.Currency, CustomerID: in.CustomerID}}, true
}

// create is POST /payments, behind the middleware.
func (p *payments) create(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "POST a payment here")
		return
	}
	pay, ok := parsePayment(r)
	if !ok {
		writeProblem(w, http.StatusBadRequest, "invalid-payment",
			"amount (an integer > 0), currency (3 letters) and customer_id (a string) are required")
		return
	}
	attempt := idemhttp.FromContext(r.Context()) // nil with IDEM_OFF=1
	sleepFor(slowCustomer, pay.CustomerID)
	switch pay.CustomerID {
	case "cus_fail_503":
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "provider-unavailable", "the provider refused: nothing was charged")
		return
	case "cus_fail_402":
		writeProblem(w, http.StatusPaymentRequired, "card-declined", "the card was declined")
		return
	case "cus_throw":
		panic("cus_throw: the handler failed")
	case "cus_unsettled":
		if attempt != nil {
			attempt.LeaveUnsettled() // maybe charged: the next request after the lease reconciles
		}
		writeProblem(w, http.StatusBadGateway, "provider-unknown", "the provider did not answer: maybe charged")
		return
	}

	pay.Tenant = tenantOf(r.Context())
	var key *string
	if attempt != nil {
		key, pay.Attempt = &attempt.Key, &attempt.Outcome
	}
	ctx := r.Context() // idemhttp's: not cancelled when the client hangs up
	// With IDEM_TX=1 the middleware's transaction, which holds the key: the payment commits with the stored
	// answer or not at all. Otherwise the pool: each statement commits on its own.
	var db idemhttp.DB = p.pool
	if tx := idemhttp.Tx(ctx); tx != nil {
		db = tx
	}
	found := false
	if attempt != nil && attempt.Recovered() {
		// The previous owner died, or ran past its lease: it may have paid already. Look before paying.
		err := db.QueryRow(ctx, `SELECT id FROM payments WHERE tenant = $1 AND idempotency_key = $2 ORDER BY id LIMIT 1`,
			pay.Tenant, *key).Scan(&pay.ID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			log.Printf("payments lookup: %v", err)
			writeProblem(w, http.StatusServiceUnavailable, "database-unavailable", "try again")
			return
		}
		found = err == nil
	}
	if !found {
		err := db.QueryRow(ctx, `INSERT INTO payments (tenant, idempotency_key, amount, currency, customer_id)
		                             VALUES ($1, $2, $3, $4, $5) RETURNING id`,
			pay.Tenant, key, pay.Amount, pay.Currency, pay.CustomerID).Scan(&pay.ID)
		if err != nil {
			// Nothing was written: 503 releases the key, and the retry pays.
			log.Printf("payments insert: %v", err)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "database-unavailable", "nothing was charged: try again")
			return
		}
	}
	// After the write, by customer: a pause to SIGKILL the app in, a panic, or a COMMIT that will fail.
	sleepFor(crashCustomer, pay.CustomerID)
	switch pay.CustomerID {
	case "cus_throw_after_write":
		panic("cus_throw_after_write: the handler failed after its write")
	case "cus_commit_fails":
		// Deferred: in the transactional mode the unique check fails at COMMIT (23505); on the pool, here.
		if _, err := db.Exec(ctx, `INSERT INTO commit_guard VALUES (1), (1)`); err != nil {
			// The payment above has committed already: the retry, with the key released, pays again (this
			// customer exists to show what the transactional mode prevents).
			log.Printf("commit_guard insert: %v", err)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "database-unavailable", "the database failed: try again")
			return
		}
	}
	w.Header().Set("Location", "/payments/"+strconv.FormatInt(pay.ID, 10))
	w.Header().Set("X-Request-Id", requestID())
	writeJSON(w, http.StatusCreated, pay)
}

// read is GET /payments/<id>: the tenant's payment, 200, or 404.
func (p *payments) read(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "payments are read here")
		return
	}
	id, err := strconv.ParseInt(lastSegment(r.URL.Path), 10, 64)
	if err != nil {
		writeProblem(w, http.StatusNotFound, "not-found", "no such payment")
		return
	}
	pay := payment{ID: id, Tenant: tenantOf(r.Context())}
	err = p.pool.QueryRow(r.Context(), `SELECT amount, currency, customer_id FROM payments WHERE id = $1 AND tenant = $2`,
		id, pay.Tenant).Scan(&pay.Amount, &pay.Currency, &pay.CustomerID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeProblem(w, http.StatusNotFound, "not-found", "no such payment")
	case err != nil:
		log.Printf("payments read: %v", err)
		writeProblem(w, http.StatusServiceUnavailable, "database-unavailable", "try again")
	default:
		writeJSON(w, http.StatusOK, pay)
	}
}

func requestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
