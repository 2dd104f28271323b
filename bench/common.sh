# Shared by bench/run.sh, bench/ab.sh and bench/sweep_waits.sh (sourced): the pgbench binary, and the
# payloads every contender sends.
# shellcheck shell=bash disable=SC2034
PGBENCH=/usr/lib/postgresql/15/bin/pgbench

# A typical payment request, the same request with another amount, and a ~200-byte answer.
BODY='{"amount": 1000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}'
BODY2='{"amount": 2000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}'
RESP='{"id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "object": "charge", "amount": 1000, "currency": "eur", "paid": true, "status": "succeeded", "receipt_url": "https://pay.example.com/receipts/acct_1/ch_3MmlLrLkdIwHu7ix0snN0B15"}'
HDRS='{"Location": "/v1/charges/ch_3MmlLrLkdIwHu7ix0snN0B15"}'
