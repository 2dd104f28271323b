// idem_keys for node:http: a Store with one method per SQL function, and idempotent(), which wraps a handler.

// The idem_keys API, bind parameters only. pg's Pool runs each query in its own transaction: this is two-step
// mode, where the claim must commit before the provider is called, and the finish after.
export class Store {
  constructor(pool, { scope, lease }) {
    this.pool = pool;
    this.scope = scope; // the tenant would go here; this demo has one
    this.lease = lease; // a PostgreSQL interval, e.g. "30s"
  }

  async claim(key, requestJson) {
    // Fields by name, never (r).*: a newer idem_result may grow columns.
    const { rows } = await this.pool.query(
      `SELECT (r).outcome, (r).token, (r).status_code, (r).response_bytes, (r).headers, (r).retry_after
         FROM (SELECT idem_claim($1, $2, $3::jsonb, lease => $4::interval) AS r) s`,
      [this.scope, key, requestJson, this.lease],
    );
    return rows[0]; // token is a string: pg returns bigint as text, and we only ever pass it back
  }

  // The bytea overload: a replay must repeat the body byte for byte (clients hash, sign or length-check it);
  // jsonb would store it reordered and respaced. An empty body is stored as NULL.
  async finish(key, token, status, body, headers) {
    await this.pool.query('SELECT idem_finish($1, $2, $3, $4, $5::bytea, headers => $6::jsonb)',
      [this.scope, key, token, status, body ? Buffer.from(body) : null, JSON.stringify(headers)]);
  }

  async release(key, token) {
    const { rows } = await this.pool.query('SELECT idem_release($1, $2, $3) AS released', [this.scope, key, token]);
    return rows[0].released;
  }

  // Unfinished keys whose owner's lease ran out: their owner most likely died.
  async stale() {
    const { rows } = await this.pool.query('SELECT key, token FROM idem_stale() WHERE scope = $1', [this.scope]);
    return rows;
  }
}

export const json = (status, payload, headers = {}) => (
  { status, headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(payload) });

const inProgress = (headers) => json(409, { error: 'a request with this Idempotency-Key is in progress' }, headers);

// Runs handler(req, body, claim) at most once per Idempotency-Key and replays its answer to every retry.
// Handlers return { status, headers, body }; claim.outcome is "claimed", or "recovered" (a dead owner's key:
// reconcile first). The contract: 400, 429 and 503 promise that nothing happened, so the key is released (a
// client may fix its request and reuse the key, as with Stripe); any other status below 500 is the final answer
// and is stored; any other 5xx means "outcome unknown", so the claim is left to run out its lease and the next
// retry recovers it and reconciles.
export function idempotent(store, handler) {
  return async (req, body) => {
    const key = req.headers['idempotency-key'];
    if (!key) return json(400, { error: 'the Idempotency-Key header is required' });
    try {
      JSON.parse(body);
    } catch {
      return json(400, { error: 'the body must be JSON' });
    }

    const claim = await store.claim(key, body);
    const outcome = { 'Idempotency-Outcome': claim.outcome }; // for people and the e2e harness
    switch (claim.outcome) {
      case 'replay':
        return {
          status: claim.status_code,
          headers: { ...claim.headers, ...outcome, 'Idempotent-Replayed': 'true' },
          body: claim.response_bytes ?? '', // a Buffer: the bytes first sent
        };
      case 'in_progress':
        return inProgress({ ...outcome, 'Retry-After': String(claim.retry_after) });
      case 'mismatch':
        return json(422, { error: 'this Idempotency-Key was used with a different request' }, outcome);
      default: // claimed or recovered: ours to do
    }

    const reply = await handler(req, body, claim);
    if ([400, 429, 503].includes(reply.status)) {
      await store.release(key, claim.token);
    } else if (reply.status < 500) {
      try {
        await store.finish(key, claim.token, reply.status, reply.body || null, reply.headers);
      } catch (err) {
        if (err.code !== '55000') throw err;
        // We were presumed dead and another request took the key over: its answer is the one that counts, so
        // send the client back for it.
        console.warn(`idem_finish ${JSON.stringify(key)}: taken over by another request`);
        return inProgress({ ...outcome, 'Retry-After': '1' });
      }
    }
    return { ...reply, headers: { ...reply.headers, ...outcome } };
  };
}
