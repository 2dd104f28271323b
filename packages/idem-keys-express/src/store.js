// The SQL the middleware runs: idem_claim, idem_finish and idem_release, bind parameters only. By default each is
// one pool.query, so one autocommit transaction: the claim commits before the handler runs and the finish after
// it, which is what lets another process see the claim, and a retry the answer. In transactional mode they run on
// one client inside the request's transaction (transaction.js), and commit with the handler's work.

// Fields by name, never r.*: a newer idem_result may grow columns. The token goes out as text because it is a
// bigint, which a JavaScript number cannot always hold, and an application may have taught pg to parse int8
// into numbers; we only ever hand it back to SQL.
const RESULT = 'r.outcome, r.token::text AS token, r.status_code, r.response_bytes, r.headers, r.retry_after';

const CLAIM_JSON = `SELECT ${RESULT}
  FROM idem_claim($1, $2, jsonb_build_object('method', $3::text, 'target', $4::text, 'body', $5::jsonb),
                  lease => $6::interval, wait => $7::interval) AS r`;

const CLAIM_BYTES = `SELECT ${RESULT}
  FROM idem_claim($1, $2, $3::bytea, lease => $4::interval, wait => $5::interval) AS r`;

const FINISH = 'SELECT idem_finish($1, $2, $3, $4, $5::bytea, headers => $6::jsonb, retention => $7::interval)';

const RELEASE = 'SELECT idem_release($1, $2, $3) AS released';

// The server could not read the body as jsonb: invalid JSON (22P02), a \u0000 escape (22P05), a NUL byte or
// text that is not UTF-8 (22021). Such a body is fingerprinted by its bytes instead.
const NOT_JSONB = new Set(['22P02', '22P05', '22021']);

// Claims the key. db is the pool, or the client of an open transaction (inTransaction). request is
// { method, target, body: Buffer, json: boolean }; lease and wait are PostgreSQL interval texts or null. Returns
// the idem_result row.
export async function claim(db, scope, key, request, { lease, wait }, inTransaction = false) {
  const { method, target, body } = request;
  if (request.json) {
    try {
      const { rows } = await db.query(CLAIM_JSON, [scope, key, method, target, body.toString('utf8'), lease, wait]);
      return rows[0];
    } catch (err) {
      if (!NOT_JSONB.has(err.code)) throw err;
      // The failed statement aborted the transaction. It wrote nothing (the body is read as jsonb before
      // idem_claim runs), so a new one starts in its place: cheaper than a savepoint around every claim.
      if (inTransaction) {
        await db.query('ROLLBACK');
        await db.query('BEGIN');
      }
    }
  }
  // method || ' ' || target || '\n' || body, built here as bytes so the body is never decoded.
  const bytes = Buffer.concat([Buffer.from(`${method} ${target}\n`, 'latin1'), body]);
  const { rows } = await db.query(CLAIM_BYTES, [scope, key, bytes, lease, wait]);
  return rows[0];
}

// Stores the answer (db: the pool, or the transaction's client). An empty body is stored as NULL; headers is an
// object of allow-listed names.
export async function finish(db, scope, key, token, answer, headers, retention) {
  const body = answer.body.length ? answer.body : null;
  await db.query(FINISH, [scope, key, token, answer.status, body, JSON.stringify(headers), retention]);
}

// Gives the key back; false when the token no longer owns it.
export async function release(pool, scope, key, token) {
  const { rows } = await pool.query(RELEASE, [scope, key, token]);
  return rows[0].released;
}
