"""idem_keys for Flask: a Store with one method per SQL function, and an @idempotent decorator for views."""
import functools
import json
import logging
from dataclasses import dataclass

import psycopg
from flask import g, jsonify, make_response, request

log = logging.getLogger(__name__)


@dataclass
class Claim:
    outcome: str
    token: int | None
    status_code: int | None
    response: bytes | None  # the body exactly as first sent (stored as bytea: jsonb would reorder and respace it)
    headers: dict | None
    retry_after: int | None


class Store:
    """The idem_keys API, bind parameters only. The pool runs in autocommit: this is two-step mode, where the
    claim must commit before the provider is called, and the finish after."""

    def __init__(self, pool, scope, lease):
        self.pool = pool
        self.scope = scope  # the tenant would go here; this demo has one
        self.lease = lease  # a PostgreSQL interval, e.g. "30s"

    def claim(self, key, request_json):
        # Fields by name, never (r).*: a newer idem_result may grow columns.
        sql = """SELECT (r).outcome, (r).token, (r).status_code, (r).response_bytes, (r).headers, (r).retry_after
                   FROM (SELECT idem_claim(%s, %s, %s::jsonb, lease => %s::interval) AS r) s"""
        with self.pool.connection() as conn:
            return Claim(*conn.execute(sql, (self.scope, key, request_json, self.lease)).fetchone())

    def finish(self, key, token, status, body, headers):
        with self.pool.connection() as conn:
            # The bytea overload: a replay must repeat the body byte for byte (clients hash, sign or
            # length-check it); jsonb would store it reordered and respaced.
            conn.execute("SELECT idem_finish(%s, %s, %s, %s, %s::bytea, headers => %s::jsonb)",
                         (self.scope, key, token, status, body, json.dumps(headers)))

    def release(self, key, token):
        with self.pool.connection() as conn:
            return conn.execute("SELECT idem_release(%s, %s, %s)", (self.scope, key, token)).fetchone()[0]

    def stale(self):
        """Unfinished keys whose owner's lease ran out: their owner most likely died."""
        with self.pool.connection() as conn:
            return conn.execute("SELECT key, token FROM idem_stale() WHERE scope = %s", (self.scope,)).fetchall()


def error(status, message, headers=None):
    return make_response(jsonify(error=message), status, headers or {})


def idempotent(store):
    """Runs the view at most once per Idempotency-Key and replays its answer to every retry.

    The view finds the claim in g.idem_claim ("claimed", or "recovered": a dead owner's key, reconcile first).
    Its contract: 400, 429 and 503 promise that nothing happened, so the key is released (a client may fix its
    request and reuse the key, as with Stripe); any other status below 500 is the final answer and is stored;
    any other 5xx means "outcome unknown", so the claim is left to run out its lease and the next retry recovers
    it and reconciles.
    """
    def decorator(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            key = request.headers.get("Idempotency-Key")
            if not key:
                return error(400, "the Idempotency-Key header is required")
            body = request.get_data(as_text=True)
            try:
                json.loads(body)
            except ValueError:
                return error(400, "the body must be JSON")

            claim = store.claim(key, body)
            outcome = {"Idempotency-Outcome": claim.outcome}  # for people and the e2e harness
            if claim.outcome == "replay":
                replayed = b"" if claim.response is None else claim.response
                return make_response(replayed, claim.status_code,
                                     {**(claim.headers or {}), **outcome, "Idempotent-Replayed": "true"})
            if claim.outcome == "in_progress":
                return error(409, "a request with this Idempotency-Key is in progress",
                             {**outcome, "Retry-After": str(claim.retry_after)})
            if claim.outcome == "mismatch":
                return error(422, "this Idempotency-Key was used with a different request", outcome)

            g.idem_claim = claim
            response = make_response(view(*args, **kwargs))
            if response.status_code in (400, 429, 503):
                store.release(key, claim.token)
            elif response.status_code < 500:
                stored = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
                try:
                    store.finish(key, claim.token, response.status_code, response.get_data() or None,
                                 stored)
                except psycopg.errors.ObjectNotInPrerequisiteState:
                    # We were presumed dead and another request took the key over: its answer is the one that
                    # counts, so send the client back for it.
                    log.warning("idem_finish %r: taken over by another request", key)
                    return error(409, "a request with this Idempotency-Key is in progress",
                                 {**outcome, "Retry-After": "1"})
            response.headers.update(outcome)
            return response
        return wrapper
    return decorator
