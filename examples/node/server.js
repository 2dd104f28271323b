// A small payment API on idem_keys: POST /payments charges a card at most once per Idempotency-Key, however
// often the client retries and even if this process dies half-way.
//
// Settings come from the environment: LISTEN_ADDR, DATABASE_URL, PROVIDER_URL, IDEM_LEASE (a PostgreSQL
// interval), IDEM_RECONCILE_EVERY (seconds, 0 = off) and IDEM_TEST_HOOKS=1 (crash hooks for the e2e harness).
import http from 'node:http';
import pg from 'pg';
import { Store, idempotent, json } from './idempotency.js';
import { poolConfig } from './multihost.js';

const env = (name, fallback) => process.env[name] || fallback;
const PROVIDER_URL = env('PROVIDER_URL', 'http://127.0.0.1:8090');
const TEST_HOOKS = process.env.IDEM_TEST_HOOKS === '1';

// DATABASE_URL may name several hosts, as for libpq (multihost.js).
const pool = new pg.Pool({ ...poolConfig(env('DATABASE_URL', 'postgres://postgres@127.0.0.1:25329/postgres')), max: 16 });
// An idle connection that breaks (a server restart) must not take the process down; the pool reconnects.
pool.on('error', (err) => console.warn(`pool: ${err.message}`));
const store = new Store(pool, { scope: 'payments', lease: env('IDEM_LEASE', '30s') });

// The provider's HTTP API. The idempotency key is our reference there, so a charge can always be found again, by
// a retry that recovers the key or by the reconciler. Returns { status, charge } (charge only on 200/201).
async function provider(method, path, payload) {
  const res = await fetch(PROVIDER_URL + path, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: payload && JSON.stringify(payload),
    signal: AbortSignal.timeout(10_000),
  });
  const body = await res.json();
  return { status: res.status, charge: res.ok ? body : null };
}

// The charge made under reference, or null.
async function lookupCharge(reference) {
  const { status, charge } = await provider('GET', `/charges?${new URLSearchParams({ reference })}`);
  if (status !== 200 && status !== 404) throw new Error(`provider lookup: status ${status}`);
  return charge;
}

// The answer to a successful payment, built from the provider's charge alone so the reconciler, which never saw
// the request, gives the same answer the handler would have.
function paymentAnswer(charge) {
  const { id, amount, currency, customer_id } = charge;
  return json(201, { charge_id: id, amount, currency, customer_id, status: 'succeeded' }, { Location: `/payments/${id}` });
}

// Lets the e2e harness kill the service at the worst moments, e.g. after the provider charged and before
// idem_finish. Only with IDEM_TEST_HOOKS=1.
function crashIf(req, moment) {
  if (TEST_HOOKS && req.headers['x-test-crash'] === moment) process.kill(process.pid, 'SIGKILL');
}

function validPayment(p) {
  return p && Number.isInteger(p.amount) && p.amount > 0 && typeof p.currency === 'string'
    && p.currency.length === 3 && typeof p.customer_id === 'string' && p.customer_id !== '';
}

const createPayment = idempotent(store, async (req, body, claim) => {
  const pay = JSON.parse(body);
  if (!validPayment(pay)) return json(400, { error: 'amount (> 0), currency (3 letters) and customer_id are required' });
  const key = req.headers['idempotency-key'];
  try {
    // A recovered key's previous owner died between its claim and its finish: it may have charged already.
    let charge = claim.outcome === 'recovered' ? await lookupCharge(key) : null;
    if (!charge) {
      crashIf(req, 'before-charge');
      const { amount, currency, customer_id } = pay;
      const res = await provider('POST', '/charges', { reference: key, amount, currency, customer_id });
      if (res.status === 402) return json(402, { error: 'card_declined' }); // final: stored and replayed
      if (res.status === 429 || res.status === 503) { // the provider promises it charged nothing
        return json(503, { error: 'payment provider unavailable, nothing charged' }, { 'Retry-After': '1' });
      }
      if (!res.charge) throw new Error(`status ${res.status}`);
      crashIf(req, 'after-charge');
      charge = res.charge;
    }
    return paymentAnswer(charge);
  } catch (err) {
    // Maybe charged, maybe not: a 502 leaves the claim to the next retry or the reconciler.
    console.warn(`provider ${JSON.stringify(key)}: ${err.message}`);
    return json(502, { error: 'payment provider unreachable' });
  }
});

// Settles every key whose owner died without finishing: if the provider holds a charge under the key, finish it
// with the answer the owner would have given; if not, nothing was charged, so release it for the client's retry.
// It uses the dead owner's token, so a retry that recovers the key meanwhile wins and our finish is refused
// (55000), which is fine. Releasing is safe even if the "dead" owner was only slow and charges after we looked:
// its finish is then refused, its client retries, and the provider, idempotent by reference, returns that same
// charge.
async function reconcile() {
  let finished = 0;
  let released = 0;
  for (const { key, token } of await store.stale()) {
    try {
      const charge = await lookupCharge(key);
      if (!charge) {
        if (await store.release(key, token)) released += 1;
        continue;
      }
      const { status, headers, body } = paymentAnswer(charge);
      await store.finish(key, token, status, body, headers);
      finished += 1;
    } catch (err) { // one bad key must not stop the pass; the next pass retries it
      console.warn(`reconcile ${JSON.stringify(key)}: ${err.message}`);
    }
  }
  return { finished, released };
}

const routes = { 'POST /payments': createPayment };

const server = http.createServer(async (req, res) => {
  let reply;
  try {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const route = routes[`${req.method} ${new URL(req.url, 'http://x').pathname}`];
    reply = route ? await route(req, Buffer.concat(chunks).toString()) : json(404, { error: 'not found' });
  } catch (err) {
    console.error(err);
    reply = json(500, { error: 'internal error' });
  }
  res.writeHead(reply.status, reply.headers).end(reply.body);
});

const every = Number(env('IDEM_RECONCILE_EVERY', '30'));
if (every > 0) {
  setInterval(async () => {
    const { finished, released } = await reconcile().catch((err) => {
      console.warn(`reconcile: ${err.message}`);
      return {};
    });
    if (finished || released) console.log(`reconcile: ${finished} finished, ${released} released`);
  }, every * 1000).unref();
}

const [host, port] = env('LISTEN_ADDR', '127.0.0.1:8083').split(':');
server.listen(Number(port), host, () => console.log(`payments (node) listening on ${host}:${port}`));
