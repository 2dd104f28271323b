// The SQL the middleware runs: idem_claim, idem_finish and idem_release, bind parameters only, the texts every
// idem_keys middleware sends (contract/sql.json). By default each is one pool.query, so one autocommit transaction:
// the claim commits before the handler runs and the finish after it, which is what lets another process see the
// claim, and a retry the answer. In transactional mode they run on one client inside the request's transaction
// (transaction.cjs), and commit with the handler's work.
'use strict';

// Durations go out as seconds (a double precision, or NULL for the server's idem_keys.lease / retention, or no
// wait), made an interval by make_interval. Fields of idem_result by name, never r.*: a newer idem_result may grow
// columns.
const SQL = {
  claim_json: `SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after
    FROM idem_claim($1, $2, jsonb_build_object('method', $3::text, 'target', $4::text, 'body', $5::jsonb),
      lease => make_interval(secs => $6::float8), wait => make_interval(secs => $7::float8)) AS r`,
  claim_bytes: `SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after
    FROM idem_claim($1, $2, $3::bytea, lease => make_interval(secs => $4::float8), wait => make_interval(secs => $5::float8)) AS r`,
  finish: `SELECT idem_finish($1, $2, $3::bigint, $4::integer, $5::bytea, headers => $6::jsonb,
    retention => make_interval(secs => $7::float8))`,
  release: 'SELECT idem_release($1, $2, $3::bigint) AS released',
};

// The server could not read the body as jsonb: invalid JSON (22P02), a \u0000 escape (22P05), a NUL byte or
// text that is not UTF-8 (22021). Such a body is fingerprinted by its bytes instead.
const NOT_JSONB = new Set(['22P02', '22P05', '22021']);

// Claims the key. db is the pool, or the client of an open transaction (inTransaction). request is
// { method, target, body: Buffer, json: boolean }; lease and wait are seconds or null. Returns the idem_result row,
// its token as a decimal string.
async function claim(db, scope, key, request, { lease, wait }, inTransaction = false) {
  const { method, target, body } = request;
  if (request.json) {
    try {
      const { rows } = await db.query(SQL.claim_json, [scope, key, method, target, body.toString('utf8'), lease, wait]);
      return withTextToken(rows[0]);
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
  const { rows } = await db.query(SQL.claim_bytes, [scope, key, bytes, lease, wait]);
  return withTextToken(rows[0]);
}

// The token is a bigint, which node-postgres gives as text unless the application taught it otherwise (int8 as
// a number, or a BigInt). It is only ever handed back to SQL, so it travels as its decimal text; a number past
// 2^53 has already lost digits, and a finish with it would be fenced off as another owner's.
function withTextToken(row) {
  if (!row || row.token === null || row.token === undefined) return row;
  const { token } = row;
  if (typeof token === 'number' && !Number.isSafeInteger(token)) {
    throw new RangeError(`idem-keys-express: the pool parses int8 into numbers, and the fencing token ${token} is `
      + 'past 2^53: leave int8 as text (node-postgres\' default) or parse it into BigInt');
  }
  return { ...row, token: String(token) };
}

// Stores the answer (db: the pool, or the transaction's client). An empty body is stored as NULL; headers is an
// object of allow-listed names; retention is seconds or null.
async function finish(db, scope, key, token, answer, headers, retention) {
  const body = answer.body.length ? answer.body : null;
  await db.query(SQL.finish, [scope, key, token, answer.status, body, JSON.stringify(headers), retention]);
}

// Gives the key back; false when the token no longer owns it.
async function release(pool, scope, key, token) {
  const { rows } = await pool.query(SQL.release, [scope, key, token]);
  return rows[0].released;
}

module.exports = { SQL, claim, finish, release };
