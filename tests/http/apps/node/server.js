// The HTTP suite's payments app on idem-keys-express (tests/http/README.md): one route behind the middleware,
// with customer ids that make the handler slow, fail, throw or leave its outcome unknown, so the suite can
// check every rule of docs/integrations.md. Usage: node server.js PORT (127.0.0.1 only); DATABASE_URL,
// IDEM_LEASE, IDEM_WAIT, IDEM_OFF and IDEM_TX from the environment.
// IDEM_LEASE and IDEM_WAIT are seconds ("4"; "4s" too).
// IDEM_PEER=express-idempotency: the benchmark's peer, what a Node team would pick instead: npm express-idempotency
// with its Redis adapter (REDIS_URL, e.g. redis://127.0.0.1:6379) in place of idem-keys-express; only the happy
// path is meant to work (bench/http/rounds.py).
// CommonJS on purpose: the package's own tests import it, this app proves require().
'use strict';
const { randomUUID } = require('node:crypto');
const express = require('express');
const pg = require('pg');
const { idempotency, releaseOnError } = require('idem-keys-express');

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || !process.env.DATABASE_URL) {
  console.error('usage: DATABASE_URL=... node server.js PORT');
  process.exit(2);
}
// Seconds, as the middleware takes them; a trailing "s" is accepted, from the suite's earlier "4s".
function seconds(name, fallback) {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text.replace(/s$/, ''));
  if (!Number.isFinite(value) || value < 0 || text.trim() === '') {
    console.error(`${name} must be seconds (e.g. 4), not '${text}'`);
    process.exit(2);
  }
  return value;
}
const LEASE = seconds('IDEM_LEASE', 30);
const WAIT = seconds('IDEM_WAIT', null);
const OFF = process.env.IDEM_OFF === '1'; // the benchmark's baseline: no middleware at all
// The middleware's transactional mode: the handler's SQL runs on req.idempotency.client, in the key's transaction.
const TX = process.env.IDEM_TX === '1';
// The benchmark's peer in place of idem-keys-express (the header comment); checked here, before anything starts.
const PEER = process.env.IDEM_PEER;
if (PEER !== undefined) {
  const wrong = PEER !== 'express-idempotency' ? `IDEM_PEER must be express-idempotency (the only peer), not '${PEER}'`
    : !process.env.REDIS_URL ? 'IDEM_PEER=express-idempotency needs REDIS_URL (redis://127.0.0.1:PORT)'
      : OFF || TX ? 'IDEM_PEER replaces idem-keys-express: it does not combine with IDEM_OFF or IDEM_TX' : null;
  if (wrong) {
    console.error(wrong);
    process.exit(2);
  }
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 16 });
pool.on('error', (err) => console.warn(`pool: ${err.message}`)); // an idle connection lost: the pool reconnects

// Several apps may start at once on one database: the advisory lock, taken in the transaction that creates the
// tables, makes the second wait for the first instead of failing on a half-created type. commit_guard's unique
// check is deferred to COMMIT: cus_commit_fails inserts the same row twice to make a COMMIT fail.
async function createTable() {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query("SELECT pg_advisory_xact_lock(hashtext('idem_keys sample app: payments table'))");
    await client.query(`CREATE TABLE IF NOT EXISTS payments (
      id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text, amount bigint NOT NULL,
      currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`);
    await client.query('CREATE TABLE IF NOT EXISTS commit_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)');
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

// The app's own problems, shaped like the middleware's.
function problem(res, status, title, code, detail) {
  res.status(status).type('application/problem+json')
    .send(JSON.stringify({ type: 'about:blank', title, status, detail, code }));
}

// A stand-in for real authentication, which runs before the middleware: the tenant is the bearer token.
function authenticate(req, res, next) {
  const match = /^Bearer ([A-Za-z0-9_-]{1,64})$/.exec(req.get('Authorization') || '');
  if (!match) {
    problem(res, 401, 'Unauthorized', 'unauthenticated', 'send Authorization: Bearer <tenant>');
    return;
  }
  req.tenant = match[1];
  next();
}

function validPayment(p) {
  return p !== null && typeof p === 'object' && Number.isSafeInteger(p.amount) && p.amount > 0
    && typeof p.currency === 'string' && /^[A-Za-z]{3}$/.test(p.currency)
    && typeof p.customer_id === 'string' && p.customer_id !== '';
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const paymentJson = (row) => ({ id: Number(row.id), tenant: row.tenant, amount: Number(row.amount),
  currency: row.currency, customer_id: row.customer_id });

async function createPayment(req, res) {
  const pay = req.body;
  if (!validPayment(pay)) {
    problem(res, 400, 'Bad Request', 'invalid-payment',
      'a JSON body with amount (an integer > 0), currency (3 letters) and customer_id (a non-empty string)');
    return;
  }
  const attempt = req.idempotency; // undefined with IDEM_OFF=1 and IDEM_PEER
  const slow = /^cus_slow_(\d+)$/.exec(pay.customer_id);
  if (slow && Number(slow[1]) <= 60000) await sleep(Number(slow[1]));
  switch (pay.customer_id) {
    case 'cus_fail_503':
      res.set('Retry-After', '1');
      problem(res, 503, 'Service Unavailable', 'provider-unavailable', 'the payment provider refused; nothing was charged');
      return;
    case 'cus_fail_402':
      problem(res, 402, 'Payment Required', 'card-declined', 'the card was declined');
      return;
    case 'cus_throw':
      throw new Error('cus_throw: the handler failed');
    case 'cus_unsettled':
      attempt?.leaveUnsettled();
      problem(res, 502, 'Bad Gateway', 'outcome-unknown', 'the payment provider did not answer: maybe charged');
      return;
    default:
  }

  // In transactional mode the middleware's client, whose transaction holds the key: the payment commits with the
  // answer or not at all. Otherwise the pool: each statement commits on its own.
  const db = attempt?.client ?? pool;
  let row;
  try {
    // A recovered attempt's previous owner died (or ran past its lease) after claiming: it may have paid already.
    if (attempt?.recovered) {
      const { rows } = await db.query(
        'SELECT * FROM payments WHERE tenant = $1 AND idempotency_key = $2 ORDER BY id LIMIT 1', [req.tenant, attempt.key]);
      [row] = rows;
    }
    if (!row) {
      const { rows } = await db.query(`INSERT INTO payments (tenant, idempotency_key, amount, currency, customer_id)
        VALUES ($1, $2, $3, $4, $5) RETURNING *`, [req.tenant, attempt?.key ?? (PEER ? req.get('Idempotency-Key') : null),
        pay.amount, pay.currency, pay.customer_id]);
      [row] = rows;
    }
    // Deferred, this fails at COMMIT in transactional mode; otherwise here, after the payment committed.
    if (pay.customer_id === 'cus_commit_fails') await db.query('INSERT INTO commit_guard VALUES (1), (1)');
  } catch (err) {
    // 503 releases the key (in transactional mode the failed statement's transaction is rolled back): retry.
    console.warn(`payments: ${err.message}`);
    res.set('Retry-After', '1');
    problem(res, 503, 'Service Unavailable', 'database-unavailable', 'the database failed: try again');
    return;
  }
  // After the write: a SIGKILL during the sleep kills the app before it answers.
  const crash = /^cus_crash_after_write_(\d+)$/.exec(pay.customer_id);
  if (crash && Number(crash[1]) <= 60000) await sleep(Number(crash[1]));
  if (pay.customer_id === 'cus_throw_after_write') throw new Error('cus_throw_after_write: the handler failed after its write');
  res.status(201).location(`/payments/${row.id}`).set('X-Request-Id', randomUUID())
    .json({ ...paymentJson(row), attempt: attempt?.outcome ?? 'claimed' });
}

async function showPayment(req, res) {
  const { rows } = /^\d{1,18}$/.test(req.params.id)
    ? await pool.query('SELECT * FROM payments WHERE id = $1 AND tenant = $2', [req.params.id, req.tenant])
    : { rows: [] };
  if (!rows.length) {
    problem(res, 404, 'Not Found', 'not-found', 'no such payment');
    return;
  }
  res.json(paymentJson(rows[0]));
}

// The peer as its READMEs show it: the adapter connected before the first request, the middleware mounted on the
// POST route after the JSON parser (its replay check compares the parsed body with the first request's), and the
// handler returning at once on a hit, because the middleware answers a replay from Redis and still calls next().
async function peerMiddleware() {
  const { idempotency: peerIdempotency, getSharedIdempotencyService } = require('express-idempotency');
  const RedisAdapter = require('express-idempotency-redis-adapter').default; // its class is its `default` export
  const adapter = new RedisAdapter({ connectionConfig: { url: process.env.REDIS_URL } });
  await adapter.connect();
  const middleware = peerIdempotency({ dataAdapter: adapter });
  const service = getSharedIdempotencyService();
  return [middleware, (req, res, next) => (service.isHit(req) ? undefined : next())];
}

async function main() {
  await createTable();
  const app = express();
  app.use(authenticate);
  if (PEER) {
    app.use(express.json());
    app.post('/payments', ...(await peerMiddleware()));
  } else {
    if (!OFF) {
      app.use(idempotency({ pool, scope: (req) => req.tenant, lease: LEASE, wait: WAIT,
        outcomeHeader: 'Idempotency-Outcome', transactional: TX }));
    }
    app.use(express.json());
  }
  app.post('/payments', createPayment);
  app.get('/payments/:id', showPayment);
  if (!OFF && !PEER) app.use(releaseOnError());

  const mode = OFF ? ', IDEM_OFF' : PEER ? `, IDEM_PEER ${PEER} on ${process.env.REDIS_URL}` : TX ? ', transactional' : '';
  app.listen(port, '127.0.0.1', () => console.log(`http sample (node) on 127.0.0.1:${port}${mode} `
    + `(Node.js ${process.versions.node})`));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
