// A small payment API on idem_keys: POST /payments charges a card at most once per Idempotency-Key, however
// often the client retries and even if this process dies half-way. Express, with idem-keys-express in front of
// the route: it claims the key, replays or refuses, and stores the handler's answer before the client sees it.
//
// Settings come from the environment: LISTEN_ADDR, DATABASE_URL, PROVIDER_URL, IDEM_LEASE (seconds:
// 30 or 30s), IDEM_RECONCILE_EVERY (seconds, 0 = off) and IDEM_TEST_HOOKS=1 (crash hooks for the e2e harness).
import express from 'express';
import pg from 'pg';
import { idempotency, releaseOnError } from 'idem-keys-express';
import { poolConfig } from './multihost.js';
import { lookupCharge, paymentAnswer, provider } from './provider.js';
import { startReconciler } from './reconciler.js';

const env = (name, fallback) => process.env[name] || fallback;
const TEST_HOOKS = process.env.IDEM_TEST_HOOKS === '1';
// One tenant: every key lives in this one scope. A service with several tenants takes the scope from the
// authenticated request instead (scope: (req) => req.user.tenantId), so no tenant can replay another's answer.
const SCOPE = 'payments';

// DATABASE_URL may name several hosts, as for libpq (multihost.js).
const pool = new pg.Pool({ ...poolConfig(env('DATABASE_URL', 'postgres://postgres@127.0.0.1:25329/postgres')), max: 16 });
// An idle connection that breaks (a server restart) must not take the process down; the pool reconnects.
pool.on('error', (err) => console.warn(`pool: ${err.message}`));

// Lets the e2e harness kill the service at the worst moments, e.g. after the provider charged and before the
// answer is stored. Only with IDEM_TEST_HOOKS=1.
function crashIf(req, moment) {
  if (TEST_HOOKS && req.get('X-Test-Crash') === moment) process.kill(process.pid, 'SIGKILL');
}

function validPayment(p) {
  return p !== null && typeof p === 'object' && Number.isInteger(p.amount) && p.amount > 0
    && typeof p.currency === 'string' && p.currency.length === 3 && typeof p.customer_id === 'string'
    && p.customer_id !== '';
}

// What the handler answers decides what becomes of the key (idem-keys-express's defaults): 503 (the provider
// promised it charged nothing) releases it, so the retry charges; any other answer is stored and replayed, a
// declined card (402) and a bad request (400) too; a 502 "maybe charged" leaves it unsettled.
async function createPayment(req, res) {
  const pay = req.body;
  if (!validPayment(pay)) {
    res.status(400).json({ error: 'amount (> 0), currency (3 letters) and customer_id are required' });
    return;
  }
  const { key, recovered } = req.idempotency;
  try {
    // A recovered key's previous owner died between its claim and its answer: it may have charged already.
    let charge = recovered ? await lookupCharge(key) : null;
    if (!charge) {
      crashIf(req, 'before-charge');
      const { amount, currency, customer_id } = pay;
      const reply = await provider('POST', '/charges', { reference: key, amount, currency, customer_id });
      if (reply.status === 402) {
        res.status(402).json({ error: 'card_declined' });
        return;
      }
      if (reply.status === 429 || reply.status === 503) { // the provider promises it charged nothing
        res.status(503).set('Retry-After', '1').json({ error: 'payment provider unavailable, nothing charged' });
        return;
      }
      if (!reply.charge) throw new Error(`status ${reply.status}`);
      crashIf(req, 'after-charge');
      charge = reply.charge;
    }
    const { status, headers, body } = paymentAnswer(charge);
    res.status(status).set(headers).send(body);
  } catch (err) {
    // Maybe charged, maybe not: the claim is left to run out its lease, and the next retry (or the reconciler)
    // recovers the key and asks the provider.
    console.warn(`provider ${JSON.stringify(key)}: ${err.message}`);
    req.idempotency.leaveUnsettled();
    res.status(502).json({ error: 'payment provider unreachable' });
  }
}

const app = express();
app.set('etag', false); // an ETag on a POST's answer would be stored and replayed for nothing
app.use(idempotency({ pool, scope: () => SCOPE, lease: Number(env('IDEM_LEASE', '30').replace(/s$/, '')), outcomeHeader: 'Idempotency-Outcome' }));
app.use(express.json()); // after idempotency(), which reads the raw body first and hands it on
app.post('/payments', createPayment);
app.use((req, res) => res.status(404).json({ error: 'not found' }));
app.use(releaseOnError()); // a handler that failed gives its key back, then the error goes on
// eslint-disable-next-line no-unused-vars -- four parameters are how Express tells an error handler
app.use((err, req, res, next) => {
  if (err.type === 'entity.parse.failed') { // express.json(): the body is not JSON
    res.status(400).json({ error: 'the body must be JSON' });
    return;
  }
  console.error(err);
  res.status(500).json({ error: 'internal error' });
});

const every = Number(env('IDEM_RECONCILE_EVERY', '30'));
if (every > 0) startReconciler(pool, SCOPE, every);

const [host, port] = env('LISTEN_ADDR', '127.0.0.1:8083').split(':');
app.listen(Number(port), host, () => console.log(`payments (node) listening on ${host}:${port}`));
