// Transactional mode against a real idem_keys ($DATABASE_URL), on Express 5 and 4: the claim, the handler's writes
// on req.idempotency.client and the finish commit together or not at all, and every client goes back to the pool.
// The middleware's pools are small (one client where requests run one at a time, two where they overlap), so a
// client not given back shows in the counts, and a later request on it fails fast instead of hanging.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, afterEach, before, describe, test } from 'node:test';
import pg from 'pg';
import { TransactionEndedError, idempotency, releaseOnError } from 'idem-keys-express';
import { problem } from '../src/problems.cjs';
import { EXPRESSES, databasePool, fresh, gate, listen, lookup, memoryLogger, post, sleep } from './helpers.js';

const observer = databasePool(); // outside every transaction the middleware opens: what other sessions see
const pools = []; // the middleware's pools, checked after each test
const smallPool = (max) => {
  const made = new pg.Pool({ connectionString: process.env.DATABASE_URL, max, connectionTimeoutMillis: 3000 });
  pools.push(made);
  return made;
};
const one = smallPool(1);
const two = smallPool(2);

const LEASE = 0.8; // seconds
const WRITES = 'express_tx_writes';
const GUARD = 'express_tx_guard'; // its unique check runs at COMMIT: two equal rows make the COMMIT fail

before(async () => {
  await observer.query(`CREATE TABLE IF NOT EXISTS ${WRITES} (tenant text NOT NULL, key text NOT NULL, note text)`);
  await observer.query(`CREATE TABLE IF NOT EXISTS ${GUARD} (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)`);
});
afterEach(() => {
  for (const p of pools) {
    assert.equal(p.idleCount, p.totalCount, 'every client is back in the pool');
    assert.equal(p.waitingCount, 0);
  }
});
after(() => Promise.all([observer, ...pools].map((p) => p.end())));

// An app like middleware.test.js's, in transactional mode on the pool given (one by default).
async function serve(express, routes, options = {}) {
  const app = express();
  app.set('env', 'test');
  app.set('etag', false);
  app.use((req, res, next) => {
    res.setHeader('Access-Control-Allow-Origin', '*');
    next();
  });
  app.use(idempotency({ pool: one, transactional: true, scope: (req) => req.get('X-Tenant'),
    outcomeHeader: 'Idempotency-Outcome', logger: memoryLogger(), ...options }));
  app.use(express.json());
  routes(app);
  app.use(releaseOnError());
  return listen(app);
}

function as(port, tenant) {
  return (key, body, opts = {}) => post(port, key, body, { ...opts, headers: [['X-Tenant', tenant], ...(opts.headers || [])] });
}

// The handler's write, on the transaction's client.
const write = (req, note) => req.idempotency.client.query(`INSERT INTO ${WRITES} (tenant, key, note) VALUES ($1, $2, $3)`,
  [req.idempotency.scope, req.idempotency.key, note]);

async function writes(tenant, key) {
  const { rows } = await observer.query(`SELECT note FROM ${WRITES} WHERE tenant = $1 AND key = $2 ORDER BY note`, [tenant, key]);
  return rows.map((r) => r.note);
}

function assertProblem(reply, status, code) {
  assert.equal(reply.status, status, `${code}: ${reply.raw}`);
  assert.equal(reply.headers['content-type'], 'application/problem+json');
  assert.equal(reply.json().code, code);
}

for (const [name, express] of EXPRESSES) {
  describe(`${name}, transactional`, () => {
    test('one commit: the claim, the handler\'s write and the answer together, then replayed', async () => {
      const seen = [];
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await write(req, 'paid');
        const { rows: [inside] } = await req.idempotency.client.query(
          'SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS claimed_here');
        seen.push({ inside: inside.claimed_here, // the claim wrote in this transaction
          others: await lookup(observer, req.idempotency.scope, req.idempotency.key), // and nobody else sees it
          othersWrites: await writes(req.idempotency.scope, req.idempotency.key) });
        res.status(201).location('/p/1').json({ n: seen.length });
      }));
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const first = await pay('k', { a: 1 });
        assert.equal(first.status, 201);
        assert.equal(first.headers['idempotency-outcome'], 'claimed');
        assert.deepEqual(seen, [{ inside: true, others: null, othersWrites: [] }]);
        assert.equal(await lookup(observer, tenant, 'k'), 'replay', 'committed before the client got it');
        assert.deepEqual(await writes(tenant, 'k'), ['paid']);
        const again = await pay('k', { a: 1 });
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.deepEqual(again.raw, first.raw);
        assert.equal(again.headers.location, '/p/1');
        assert.equal(seen.length, 1, 'the handler ran once');
        assertProblem(await pay('k', { a: 2 }), 422, 'key-reused');
      } finally {
        await server.close();
      }
    });

    test('a handler that throws: nothing written, the key free at once', async () => {
      const server = await serve(express, (app) => {
        app.post('/throw', async (req) => {
          await write(req, 'lost');
          throw new Error('after the write');
        });
        app.post('/next', (req, res, next) => {
          write(req, 'lost').then(() => next(new Error('after the write')), next);
        });
      });
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        for (const path of ['/next', ...(name === 'express 5' ? ['/throw'] : [])]) { // a rejection: Express 5 only
          assert.equal((await pay(path, {}, { path })).status, 500, path);
          assert.deepEqual(await writes(tenant, path), [], `${path}: rolled back`);
          assert.equal(await lookup(observer, tenant, path), null, `${path}: no claim`);
          assert.equal((await pay(path, {}, { path })).headers['idempotency-outcome'], 'claimed', `${path}: free`);
        }
      } finally {
        await server.close();
      }
    });

    test('a retryable answer: sent, nothing written, the key free', async () => {
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await write(req, 'lost');
        res.status(503).set('Retry-After', '7').json({ busy: true });
      }));
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const refused = await pay('k', {});
        assert.deepEqual([refused.status, refused.headers['retry-after'], refused.json()], [503, '7', { busy: true }]);
        assert.deepEqual(await writes(tenant, 'k'), []);
        assert.equal(await lookup(observer, tenant, 'k'), null);
      } finally {
        await server.close();
      }
    });

    test('a failed COMMIT: 503 commit-failed, Retry-After 1, nothing stored, nothing written', async () => {
      const logger = memoryLogger();
      let calls = 0;
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        calls += 1;
        await write(req, 'lost');
        if (calls === 1) await req.idempotency.client.query(`INSERT INTO ${GUARD} VALUES (1), (1)`); // fails at COMMIT
        res.status(201).location('/p/1').json({ calls });
      }), { logger });
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const failed = await pay('k', {});
        assertProblem(failed, 503, 'commit-failed');
        assert.deepEqual(failed.raw, problem('commit-failed').body, 'the bytes every middleware sends');
        assert.equal(failed.headers['retry-after'], '1');
        assert.equal(failed.headers.location, undefined, 'none of the handler\'s headers');
        assert.equal(failed.headers['access-control-allow-origin'], '*', 'set before the middleware: kept');
        assert.match(logger.lines.find(([level]) => level === 'error')[1], /COMMIT for "k": .*duplicate key/);
        assert.deepEqual(await writes(tenant, 'k'), []);
        assert.equal(await lookup(observer, tenant, 'k'), null, 'nothing stored, the key free');
        const retried = await pay('k', {});
        assert.deepEqual([retried.status, retried.headers['idempotency-outcome']], [201, 'claimed']);
        assert.deepEqual(await writes(tenant, 'k'), ['lost'], 'the retry\'s write, once');
      } finally {
        await server.close();
      }
    });

    test('a transaction the handler broke: COMMIT would roll back, so 500 store-failed and nothing kept', async () => {
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await write(req, 'lost');
        await req.idempotency.client.query('SELECT 1/0').catch(() => {}); // swallowed, but the transaction is aborted
        res.status(201).json({ ok: true });
      }));
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        assertProblem(await pay('k', {}), 500, 'store-failed');
        assert.deepEqual(await writes(tenant, 'k'), []);
        assert.equal(await lookup(observer, tenant, 'k'), null);
      } finally {
        await server.close();
      }
    });

    test('leaveUnsettled: the write and the claim commit, the answer is not stored; recovered after the lease', async () => {
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        if (req.idempotency.recovered) {
          const { rows } = await req.idempotency.client.query(`SELECT note FROM ${WRITES} WHERE tenant = $1 AND key = $2`,
            [req.idempotency.scope, req.idempotency.key]);
          res.status(201).json({ found: rows.map((r) => r.note) });
          return;
        }
        await write(req, 'maybe');
        req.idempotency.leaveUnsettled();
        res.status(502).json({ unknown: true });
      }), { lease: LEASE, pool: two });
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const first = await pay('k', {});
        assert.deepEqual([first.status, first.json()], [502, { unknown: true }]);
        assert.deepEqual(await writes(tenant, 'k'), ['maybe'], 'committed');
        assert.equal(await lookup(observer, tenant, 'k'), 'in_progress', 'the claim committed, no answer');
        assertProblem(await pay('k', {}), 409, 'request-in-progress');
        await sleep(LEASE * 1000 + 200);
        const recovered = await pay('k', {});
        assert.equal(recovered.headers['idempotency-outcome'], 'recovered');
        assert.deepEqual(recovered.json(), { found: ['maybe'] }, 'the recovered attempt sees what the first did');
        assert.equal((await pay('k', {})).headers['idempotent-replayed'], 'true');
      } finally {
        await server.close();
      }
    });

    test('leaveUnsettled, then an error: committed all the same, the key kept', async () => {
      const server = await serve(express, (app) => app.post('/', async (req, res, next) => {
        await write(req, 'maybe');
        req.idempotency.leaveUnsettled();
        next(new Error('the provider timed out'));
      }), { lease: 60 });
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        assert.equal((await pay('k', {})).status, 500);
        assert.deepEqual(await writes(tenant, 'k'), ['maybe']);
        assert.equal(await lookup(observer, tenant, 'k'), 'in_progress');
      } finally {
        await server.close();
      }
    });

    test('a duplicate while the first transaction is open: 409 at once; with wait, the first\'s answer', async () => {
      const hold = gate();
      const safety = setTimeout(hold.open, 4000); // without the extension's lock the duplicate blocks: fail, not hang
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await write(req, 'once');
        await hold.promise;
        res.status(201).json({ at: Date.now() });
      }), { pool: two });
      const waiting = await serve(express, (app) => app.post('/', async (req, res) => {
        await sleep(300);
        res.status(201).json({ at: Date.now() });
      }), { pool: two, wait: 5 });
      const tenant = fresh('t');
      try {
        const first = as(server.port, tenant)('k', { a: 1 });
        await sleep(150);
        const started = Date.now();
        const busy = await as(server.port, tenant)('k', { a: 1 });
        assertProblem(busy, 409, 'request-in-progress');
        assert.equal(busy.headers['retry-after'], '1');
        assert.equal(busy.headers['idempotency-outcome'], 'in_progress');
        assert.ok(Date.now() - started < 2000, `answered at once, not after the first: ${Date.now() - started} ms`);
        hold.open();
        assert.equal((await first).status, 201);
        assert.deepEqual(await writes(tenant, 'k'), ['once']);

        const pay = as(waiting.port, fresh('t'));
        const one1 = pay('w', { a: 1 });
        await sleep(100);
        const second = await pay('w', { a: 1 });
        assert.equal(second.headers['idempotent-replayed'], 'true');
        assert.deepEqual(second.raw, (await one1).raw);
      } finally {
        clearTimeout(safety);
        hold.open();
        await Promise.all([server.close(), waiting.close()]);
      }
    });

    test('a client that hangs up changes nothing: the work commits, the answer is stored', async () => {
      const hold = gate();
      const entered = gate();
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        entered.open();
        await hold.promise;
        await write(req, 'done');
        res.status(201).json({ ok: true });
      }));
      const tenant = fresh('t');
      try {
        const gone = http.request({ host: '127.0.0.1', port: server.port, method: 'POST', path: '/', agent: false,
          headers: { 'X-Tenant': tenant, 'Idempotency-Key': 'k', 'Content-Type': 'application/json' } });
        gone.on('error', () => {});
        gone.end('{}');
        await entered.promise;
        gone.destroy();
        await sleep(50);
        hold.open();
        let outcome = null;
        for (let i = 0; i < 50 && outcome !== 'replay'; i += 1) {
          await sleep(20);
          outcome = await lookup(observer, tenant, 'k');
        }
        assert.equal(outcome, 'replay');
        assert.deepEqual(await writes(tenant, 'k'), ['done']);
        // The client goes back once the COMMIT's reply is read, a moment after other sessions see the commit.
        for (let i = 0; i < 50 && one.idleCount !== one.totalCount; i += 1) await sleep(10);
      } finally {
        hold.open();
        await server.close();
      }
    });

    test('the client after the answer: query() rejects with TransactionEndedError, nothing written', async () => {
      const late = gate(); // opened once the test has the answer: the handler's late writes come after it, always
      let lateWrites;
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        const { client, scope, key } = req.idempotency;
        await write(req, 'paid');
        res.status(201).json({ ok: true });
        const insert = `INSERT INTO ${WRITES} (tenant, key, note) VALUES ($1, $2, 'late')`;
        lateWrites = late.promise.then(() => Promise.all([
          client.query(insert, [scope, key]).then(() => 'written', (err) => err),
          new Promise((resolve) => { client.query(insert, [scope, key], (err) => resolve(err ?? 'written')); }),
        ]));
      }));
      const tenant = fresh('t');
      try {
        assert.equal((await as(server.port, tenant)('k', {})).status, 201);
        late.open();
        for (const refused of await lateWrites) { // the promise form, then pg's callback form
          assert.ok(refused instanceof TransactionEndedError, `the late write: ${refused}`);
          assert.equal(refused.code, 'IDEM_KEYS_TRANSACTION_ENDED');
          assert.match(refused.message, /req\.idempotency\.client .*after the handler answered/);
        }
        assert.deepEqual(await writes(tenant, 'k'), ['paid'], 'the late writes ran nowhere');
      } finally {
        late.open();
        await server.close();
      }
    });

    test('a handler that fails after answering: the answer stands, committed, as it was sent', async () => {
      let late;
      const server = await serve(express, (app) => app.post('/', async (req, res, next) => {
        await write(req, 'paid');
        res.status(201).location('/p/1').json({ ok: true });
        late = write(req, 'late').then(() => 'written', (err) => err); // refused: the client is no longer its
        next(new Error('after the answer'));
      }));
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const answered = await pay('k', {});
        assert.deepEqual([answered.status, answered.statusMessage, answered.json()], [201, 'Created', { ok: true }]);
        assert.equal(answered.headers.location, '/p/1');
        assert.ok((await late) instanceof TransactionEndedError, `the write after the answer: ${await late}`);
        assert.deepEqual(await writes(tenant, 'k'), ['paid']);
        const again = await pay('k', {});
        assert.deepEqual([again.headers['idempotent-replayed'], again.raw], ['true', answered.raw]);
      } finally {
        await server.close();
      }
    });

    test('the handler cannot release the client: release() throws, the transaction commits as usual', async () => {
      let thrown = null;
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await write(req, 'paid');
        try {
          req.idempotency.client.release();
        } catch (err) {
          thrown = err;
        }
        await write(req, 'still in it');
        res.status(201).json({ ok: true });
      }));
      const tenant = fresh('t');
      try {
        assert.equal((await as(server.port, tenant)('k', {})).status, 201);
        assert.match(String(thrown?.message), /the middleware releases/);
        assert.deepEqual(await writes(tenant, 'k'), ['paid', 'still in it']);
        assert.equal(await lookup(observer, tenant, 'k'), 'replay');
      } finally {
        await server.close();
      }
    });

    test('a body PostgreSQL cannot read as jsonb: the transaction starts again for the bytes claim', async () => {
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await write(req, 'bytes');
        res.status(201).json({ ok: true });
      }));
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      const type = 'application/vnd.test+json'; // express.json() leaves it alone
      try {
        assert.equal((await pay('k', '{"a": "\\u0000"}', { type })).status, 201);
        assert.equal((await pay('k', '{"a": "\\u0000"}', { type })).headers['idempotent-replayed'], 'true');
        assert.deepEqual(await writes(tenant, 'k'), ['bytes']);
      } finally {
        await server.close();
      }
    });

    test('per request: the function picks the routes; the others run as before, without a client', async () => {
      const seen = {};
      const app = express();
      app.use(idempotency({ pool: one, scope: () => 'per-route', transactional: (req) => req.path.startsWith('/tx'),
        logger: memoryLogger() }));
      app.post(/.*/, (req, res) => {
        seen[req.path] = req.idempotency.client === undefined ? 'none' : typeof req.idempotency.client.query;
        res.status(201).end();
      });
      // and one route with a middleware of its own
      const routed = express();
      routed.post('/only', idempotency({ pool: one, scope: () => 'per-route', transactional: true }), (req, res) => {
        seen.routed = typeof req.idempotency.client.query;
        res.status(201).end();
      });
      const server = await listen(app);
      const server2 = await listen(routed);
      try {
        await post(server.port, fresh('k'), {}, { path: '/tx/a' });
        await post(server.port, fresh('k'), {}, { path: '/plain' });
        await post(server2.port, fresh('k'), {}, { path: '/only' });
        assert.deepEqual(seen, { '/tx/a': 'function', '/plain': 'none', routed: 'function' });
      } finally {
        await Promise.all([server.close(), server2.close()]);
      }
    });
  });
}

describe('transactional, when the database fails', () => {
  const [, express] = EXPRESSES[0];

  test('no connection: 503 store-unavailable, the handler not run', async () => {
    let ran = false;
    const down = { query: () => Promise.reject(new Error('down')), connect: () => Promise.reject(new Error('connect ECONNREFUSED')) };
    const logger = memoryLogger();
    const server = await serve(express, (app) => app.post('/', () => { ran = true; }), { pool: down, logger });
    try {
      const reply = await as(server.port, 't')('k', {});
      assertProblem(reply, 503, 'store-unavailable');
      assert.equal(reply.headers['retry-after'], '1');
      assert.equal(ran, false);
      assert.match(logger.lines[0][1], /ECONNREFUSED/);
    } finally {
      await server.close();
    }
  });

  test('a ROLLBACK that fails: the client is destroyed, never pooled with its transaction open', async () => {
    const released = [];
    // The pool's real clients, but ROLLBACK fails without reaching the server and release() is watched.
    const broken = {
      query: (text, values) => one.query(text, values),
      async connect() {
        const client = await one.connect();
        return {
          query: (text, values) => (text === 'ROLLBACK' ? Promise.reject(new Error('connection lost')) : client.query(text, values)),
          release: (err) => {
            released.push(err ? err.message : 'pooled');
            client.release(err);
          },
        };
      },
    };
    const logger = memoryLogger();
    const server = await serve(express, (app) => app.post('/', async (req, res) => {
      await write(req, 'lost');
      res.status(503).json({ busy: true });
    }), { pool: broken, logger });
    const tenant = fresh('t');
    try {
      const reply = await as(server.port, tenant)('k', {});
      assert.equal(reply.status, 503, 'the handler\'s answer all the same');
      assert.deepEqual(released, ['connection lost']);
      assert.match(logger.lines.find(([level]) => level === 'warn')[1], /ROLLBACK for "k": connection lost/);
      for (let i = 0; i < 50 && (await lookup(observer, tenant, 'k')) !== null; i += 1) await sleep(20);
      assert.equal(await lookup(observer, tenant, 'k'), null, 'the server ended the transaction with the connection');
      assert.deepEqual(await writes(tenant, 'k'), []);
    } finally {
      await server.close();
    }
  });
});
