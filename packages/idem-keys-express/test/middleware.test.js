// The middleware against a real idem_keys ($DATABASE_URL), on Express 5 and 4: every outcome of
// docs/integrations.md, and what the handler's answer does to the key.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { idempotency, releaseOnError } from 'idem-keys-express';
import { contract } from './contract.js';
import { EXPRESSES, databasePool, fresh, gate, listen, lookup, memoryLogger, post, send, sleep } from './helpers.js';

const pool = databasePool();
after(() => pool.end());

const LEASE = 0.8; // seconds: the lease-driven tests wait just past it

// An app with the middleware (scope from X-Tenant, outcome header on, a CORS header set before it), express.json()
// after it, the routes a test adds, releaseOnError() and Express's own error path.
async function serve(express, routes, options = {}) {
  const app = express();
  app.set('env', 'test'); // Express's final handler stays quiet about the errors tests raise on purpose
  app.set('etag', false);
  app.use((req, res, next) => {
    res.setHeader('Access-Control-Allow-Origin', '*');
    next();
  });
  app.use(idempotency({ pool, scope: (req) => req.get('X-Tenant'), outcomeHeader: 'Idempotency-Outcome',
    logger: memoryLogger(), ...options }));
  app.use(express.json());
  routes(app);
  app.use(releaseOnError());
  return listen(app);
}

// A POST as tenant with key (unless undefined).
function as(port, tenant) {
  return (key, body, opts = {}) => post(port, key, body, { ...opts, headers: [['X-Tenant', tenant], ...(opts.headers || [])] });
}

const PROBLEM_BODIES = Object.fromEntries(contract('problems').problems.map((p) => [p.code, p.body]));

function assertProblem(reply, status, code) {
  assert.equal(reply.status, status, `${code}: ${reply.raw}`);
  assert.equal(reply.headers['content-type'], 'application/problem+json');
  assert.equal(reply.raw.toString(), PROBLEM_BODIES[code], 'the bytes of contract/problems.json');
}

for (const [name, express] of EXPRESSES) {
  describe(name, () => {
    test('claimed: the answer is stored before it is sent, then replayed byte for byte', async () => {
      const seen = [];
      const server = await serve(express, (app) => app.post('/pay', (req, res) => {
        seen.push({ idem: req.idempotency, body: req.body });
        res.status(201).location('/pay/1').set('X-Request-Id', fresh('r')).json({ n: seen.length, echo: req.body });
      }));
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const first = await pay('k-1', { amount: 10 }, { path: '/pay?x=1' });
        assert.equal(first.status, 201);
        assert.equal(first.headers['idempotency-outcome'], 'claimed');
        assert.equal(first.headers['idempotent-replayed'], undefined);
        assert.equal(await lookup(pool, tenant, 'k-1'), 'replay', 'stored before the client got it');
        const { idem, body } = seen[0];
        assert.deepEqual(body, { amount: 10 }, 'express.json() after the middleware');
        assert.deepEqual({ ...idem, token: undefined, leaveUnsettled: undefined },
          { scope: tenant, key: 'k-1', outcome: 'claimed', token: undefined, recovered: false, client: undefined,
            leaveUnsettled: undefined });
        assert.match(idem.token, /^\d+$/, 'the bigint token as a string');
        assert.equal(typeof idem.leaveUnsettled, 'function');

        for (let i = 0; i < 2; i += 1) {
          const again = await pay('"k-1"', { amount: 10 }, { path: '/pay?x=1' }); // the quoted form: the same key
          assert.equal(again.status, 201);
          assert.deepEqual(again.raw, first.raw);
          assert.equal(again.headers['idempotent-replayed'], 'true');
          assert.equal(again.headers['idempotency-outcome'], 'replay');
          assert.equal(again.headers.location, '/pay/1');
          assert.equal(again.headers['content-type'], first.headers['content-type']);
          assert.equal(again.headers['x-request-id'], undefined, 'not on the allow-list');
          assert.equal(again.headers['access-control-allow-origin'], '*', 'set before the middleware: kept');
        }
        assert.equal(seen.length, 1, 'the handler ran once');
      } finally {
        await server.close();
      }
    });

    test('a streamed answer is held whole, stored, and replayed the same', async () => {
      const server = await serve(express, (app) => app.post('/s', (req, res) => {
        res.writeHead(200, { 'Content-Type': 'text/plain', Link: ['</a>; rel="a"', '</b>; rel="b"'] });
        res.write('one,');
        setTimeout(() => {
          res.write(Buffer.from('two,'));
          res.end('three');
        }, 20);
      }), { storedHeaders: ['content-type', 'LINK'] });
      const pay = as(server.port, fresh('t'));
      try {
        const first = await pay('k', {}, { path: '/s' });
        assert.equal(first.raw.toString(), 'one,two,three');
        assert.equal(first.headers['content-length'], '13', 'sent whole, not chunked');
        const again = await pay('k', {}, { path: '/s' });
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.deepEqual(again.raw, first.raw);
        assert.equal(again.headers.link, '</a>; rel="a", </b>; rel="b"', 'several values joined');
      } finally {
        await server.close();
      }
    });

    test('res.sendFile: a file piped into the response is held and replayed too', async () => {
      const file = fileURLToPath(new URL('../package.json', import.meta.url));
      const server = await serve(express, (app) => app.post('/f', (req, res, next) => res.sendFile(file, (err) => err && next(err))));
      const pay = as(server.port, fresh('t'));
      try {
        const first = await pay('k', {}, { path: '/f' });
        assert.equal(first.status, 200);
        assert.deepEqual(first.raw, readFileSync(file));
        const again = await pay('k', {}, { path: '/f' });
        assert.equal(again.headers['idempotent-replayed'], 'true');
        assert.deepEqual(again.raw, first.raw);
        assert.equal(again.headers['content-type'], first.headers['content-type']);
      } finally {
        await server.close();
      }
    });

    test('no key, a malformed key, two keys', async () => {
      let ran = 0;
      const server = await serve(express, (app) => app.post('/', (req, res) => {
        ran += 1;
        res.json({ idempotency: req.idempotency ?? null });
      }));
      const pay = as(server.port, fresh('t'));
      try {
        assertProblem(await pay(undefined, {}), 400, 'key-missing');
        for (const bad of ['two words', '"open', 'k'.repeat(256), '"a";p=1']) assertProblem(await pay(bad, {}), 400, 'key-malformed');
        const twice = await send(server.port, { headers: [['X-Tenant', 't'], ['Idempotency-Key', 'a'], ['Idempotency-Key', 'b']] });
        assertProblem(twice, 400, 'key-malformed');
        assert.equal(ran, 0);
      } finally {
        await server.close();
      }
      const optional = await serve(express, (app) => app.post('/', (req, res) => res.json({ idempotency: req.idempotency ?? null })),
        { required: false });
      try {
        const passed = await as(optional.port, 't')(undefined, {});
        assert.equal(passed.status, 200);
        assert.deepEqual(passed.json(), { idempotency: null }, 'without a key and not required: untouched');
        assertProblem(await as(optional.port, 't')('a b', {}), 400, 'key-malformed');
      } finally {
        await optional.close();
      }
    });

    test('other methods pass untouched', async () => {
      const server = await serve(express, (app) => {
        app.get('/', (req, res) => res.json({ idempotency: req.idempotency ?? null }));
        app.put('/', (req, res) => res.json({ idempotency: req.idempotency ?? null }));
      });
      try {
        const got = await send(server.port, { method: 'GET', headers: [['Idempotency-Key', 'not valid']] });
        assert.deepEqual([got.status, got.json(), got.headers['idempotency-outcome']], [200, { idempotency: null }, undefined]);
        const put = await send(server.port, { method: 'PUT', headers: [['Idempotency-Key', 'k']] });
        assert.deepEqual(put.json(), { idempotency: null });
      } finally {
        await server.close();
      }
    });

    test('no scope: 500 scope-missing, logged, the handler not run', async () => {
      const logger = memoryLogger();
      let ran = false;
      const server = await serve(express, (app) => app.post('/', () => { ran = true; }), { logger });
      try {
        assertProblem(await post(server.port, 'k', {}), 500, 'scope-missing');
        assert.equal(ran, false);
        assert.match(logger.lines[0][1], /scope\(\) gave no scope/);
      } finally {
        await server.close();
      }
    });

    test('in progress: 409 with Retry-After; then the first answer', async () => {
      const hold = gate();
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await hold.promise;
        res.status(201).json({ done: true });
      }));
      const pay = as(server.port, fresh('t'));
      try {
        const first = pay('k', { a: 1 });
        await sleep(100);
        const busy = await pay('k', { a: 1 });
        assertProblem(busy, 409, 'request-in-progress');
        assert.ok(Number(busy.headers['retry-after']) >= 1, `Retry-After ${busy.headers['retry-after']}`);
        assert.equal(busy.headers['idempotency-outcome'], 'in_progress');
        hold.open();
        assert.equal((await first).status, 201);
        assert.equal((await pay('k', { a: 1 })).headers['idempotent-replayed'], 'true');
      } finally {
        hold.open();
        await server.close();
      }
    });

    test('with wait, a duplicate waits for the first answer', async () => {
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        await sleep(300);
        res.status(201).json({ at: Date.now() });
      }), { wait: 5 });
      const pay = as(server.port, fresh('t'));
      try {
        const first = pay('k', { a: 1 });
        await sleep(80);
        const second = await pay('k', { a: 1 });
        assert.equal(second.status, 201);
        assert.equal(second.headers['idempotent-replayed'], 'true');
        assert.deepEqual(second.raw, (await first).raw);
      } finally {
        await server.close();
      }
    });

    // The vectors of contract/fingerprints.json run in fingerprints.test.js; these are the cases the package's own
    // body test adds (a raw NUL byte, text that is not UTF-8), and the outcome header of a mismatch.
    test('the fingerprint: bodies the package itself sends by their bytes; the same bytes as JSON and as text', async () => {
      let ran = 0;
      const server = await serve(express, (app) => app.post(/.*/, (req, res) => {
        ran += 1;
        res.status(201).json({ ran });
      }));
      const pay = as(server.port, fresh('t'));
      try {
        // A +json type, which express.json() leaves alone by default, so the handler answers.
        const type = 'application/vnd.test+json';
        for (const [key, body] of [['nul-byte', '{"a": "\0"}'], ['latin1', Buffer.from([0x22, 0xe9, 0x22])]]) {
          assert.equal((await pay(key, body, { type })).status, 201, key);
          assert.equal((await pay(key, body, { type })).headers['idempotent-replayed'], 'true', key);
        }
        assert.equal((await pay('j', '{"a": 1}')).status, 201);
        const asText = await pay('j', '{"a": 1}', { type: 'text/plain' });
        assertProblem(asText, 422, 'key-reused');
        assert.equal(asText.headers['idempotency-outcome'], 'mismatch');
        assert.equal(ran, 3);
      } finally {
        await server.close();
      }
    });

    test('the target is the path and query as sent, whatever the mount path', async () => {
      const server = await serve(express, (app) => {
        const router = express.Router();
        router.post('/x', (req, res) => res.status(201).json({ url: req.url }));
        app.use('/api', router);
      });
      const pay = as(server.port, fresh('t'));
      try {
        assert.equal((await pay('k', {}, { path: '/api/x?a=%41' })).status, 201);
        assert.equal((await pay('k', {}, { path: '/api/x?a=%41' })).headers['idempotent-replayed'], 'true');
        assertProblem(await pay('k', {}, { path: '/api/x?a=A' }), 422, 'key-reused');
      } finally {
        await server.close();
      }
    });

    test('a retryable answer releases the key; other answers, errors too, are stored', async () => {
      const server = await serve(express, (app) => app.post('/:status', (req, res) => {
        res.status(Number(req.params.status)).set('Retry-After', '7').json({ status: req.params.status, n: req.body.n });
      }));
      const pay = as(server.port, fresh('t'));
      try {
        for (const status of [503, 429]) {
          const refused = await pay(`k${status}`, { n: 1 }, { path: `/${status}` });
          assert.equal(refused.status, status);
          assert.equal(refused.headers['retry-after'], '7', "the handler's own headers");
          const retried = await pay(`k${status}`, { n: 2 }, { path: '/201' }); // released: even another request
          assert.equal(retried.headers['idempotency-outcome'], 'claimed');
        }
        for (const status of [400, 402, 404, 500]) {
          const first = await pay(`k${status}`, { n: 1 }, { path: `/${status}` });
          const again = await pay(`k${status}`, { n: 1 }, { path: `/${status}` });
          assert.equal(again.status, status);
          assert.equal(again.headers['idempotent-replayed'], 'true', `${status} stored`);
          assert.deepEqual(again.raw, first.raw);
        }
      } finally {
        await server.close();
      }
      const custom = await serve(express, (app) => app.post('/', (req, res) => res.status(500).end()),
        { retryableStatuses: [500] });
      try {
        const pay2 = as(custom.port, fresh('t'));
        await pay2('k', {});
        assert.equal((await pay2('k', {})).headers['idempotency-outcome'], 'claimed');
      } finally {
        await custom.close();
      }
    });

    test('a handler error releases the key and takes Express\'s error path', async () => {
      const server = await serve(express, (app) => {
        app.post('/next', (req, res, next) => {
          res.set('Location', '/half-done');
          res.write('partial');
          next(Object.assign(new Error('boom'), { status: 502 }));
        });
        app.post('/throw', () => {
          throw new Error('thrown');
        });
        app.post('/after', (req, res, next) => {
          res.status(201).json({ answered: true });
          next(new Error('too late to matter'));
        });
      });
      const pay = as(server.port, fresh('t'));
      try {
        for (const path of ['/next', '/throw']) {
          const failed = await pay(path, {}, { path });
          assert.equal(failed.status, path === '/next' ? 502 : 500, 'the status Express\'s final handler chose');
          assert.match(failed.headers['content-type'], /text\/html/);
          assert.ok(!failed.raw.includes('partial'), 'what the handler had written is dropped');
          assert.equal((await pay(path, {}, { path })).headers['idempotency-outcome'], 'claimed', `${path}: released`);
        }
        const answered = await pay('after', {}, { path: '/after' });
        assert.equal(answered.status, 201, 'an error after the answer: the answer stands');
        assert.equal(answered.statusMessage, 'Created', 'not the reason phrase of Express\'s error path');
        assert.equal((await pay('after', {}, { path: '/after' })).headers['idempotent-replayed'], 'true');
      } finally {
        await server.close();
      }
    });

    if (name === 'express 5') {
      test('a rejected promise releases the key', async () => {
        const server = await serve(express, (app) => app.post('/', async () => {
          await sleep(5);
          throw new Error('rejected');
        }));
        const pay = as(server.port, fresh('t'));
        try {
          assert.equal((await pay('k', {})).status, 500);
          assert.equal((await pay('k', {})).headers['idempotency-outcome'], 'claimed');
        } finally {
          await server.close();
        }
      });
    }

    test('leaveUnsettled: sent, not stored, recovered after the lease', async () => {
      const server = await serve(express, (app) => app.post('/', (req, res) => {
        req.idempotency.leaveUnsettled();
        res.status(502).json({ recovered: req.idempotency.recovered });
      }), { lease: LEASE });
      const pay = as(server.port, fresh('t'));
      try {
        const first = await pay('k', {});
        assert.deepEqual([first.status, first.json()], [502, { recovered: false }]);
        assertProblem(await pay('k', {}), 409, 'request-in-progress');
        await sleep(LEASE * 1000 + 200);
        const recovered = await pay('k', {});
        assert.equal(recovered.headers['idempotency-outcome'], 'recovered');
        assert.deepEqual(recovered.json(), { recovered: true });
      } finally {
        await server.close();
      }
    });

    test('leaveUnsettled, then an error: the key is not released, the retry after the lease recovers', async () => {
      const server = await serve(express, (app) => app.post('/', (req) => {
        if (!req.idempotency.recovered) {
          req.idempotency.leaveUnsettled();
          throw new Error('the provider timed out');
        }
        throw Object.assign(new Error('still failing'), { status: 503 });
      }), { lease: LEASE });
      const pay = as(server.port, fresh('t'));
      try {
        assert.equal((await pay('k', {})).status, 500, 'the error takes Express\'s error path');
        assertProblem(await pay('k', {}), 409, 'request-in-progress');
        await sleep(LEASE * 1000 + 200);
        const recovered = await pay('k', {});
        assert.equal(recovered.status, 503);
        assert.equal(recovered.headers['idempotency-outcome'], 'recovered');
        assert.equal((await pay('k', {})).headers['idempotency-outcome'], 'claimed',
          'a failure without leaveUnsettled releases the key as before');
      } finally {
        await server.close();
      }
    });

    test('a late finish is fenced off: 409 lease-lost, the new owner\'s answer replayed', async () => {
      const logger = memoryLogger();
      const hold = gate();
      let calls = 0;
      const server = await serve(express, (app) => app.post('/', async (req, res) => {
        calls += 1;
        const mine = calls;
        if (mine === 1) await hold.promise;
        res.status(201).set('Location', `/by/${mine}`).json({ by: mine, outcome: req.idempotency.outcome });
      }), { lease: LEASE, logger });
      const pay = as(server.port, fresh('t'));
      try {
        const late = pay('k', { a: 1 });
        await sleep(LEASE * 1000 + 200);
        const taker = await pay('k', { a: 1 });
        assert.deepEqual(taker.json(), { by: 2, outcome: 'recovered' });
        hold.open();
        const lateReply = await late;
        assertProblem(lateReply, 409, 'lease-lost');
        assert.equal(lateReply.headers['retry-after'], '1');
        assert.equal(lateReply.headers.location, undefined, 'none of the late answer\'s headers');
        assert.equal(lateReply.headers['access-control-allow-origin'], '*');
        assert.match(logger.lines.find(([level]) => level === 'warn')[1], /lease was lost/);
        const replay = await pay('k', { a: 1 });
        assert.deepEqual(replay.raw, taker.raw);
      } finally {
        hold.open();
        await server.close();
      }
    });

    test('an answer that cannot be stored: 500 store-failed, the key left to its lease', async () => {
      const logger = memoryLogger();
      const failing = { query: (text, values) => (text.includes('idem_finish') ? Promise.reject(new Error('gone')) : pool.query(text, values)) };
      const server = await serve(express, (app) => app.post('/', (req, res) => res.status(201).json({ ok: 1 })),
        { pool: failing, logger });
      const pay = as(server.port, fresh('t'));
      try {
        assertProblem(await pay('k', {}), 500, 'store-failed');
        assert.match(logger.lines[0][1], /idem_finish "k": gone/);
        assertProblem(await pay('k', {}), 409, 'request-in-progress');
      } finally {
        await server.close();
      }
    });

    test('the store unreachable: 503 store-unavailable, the handler not run', async () => {
      let ran = false;
      const down = { query: () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })) };
      const server = await serve(express, (app) => app.post('/', () => { ran = true; }), { pool: down });
      try {
        const reply = await as(server.port, 't')('k', {});
        assertProblem(reply, 503, 'store-unavailable');
        assert.equal(reply.headers['retry-after'], '1');
        assert.equal(ran, false);
      } finally {
        await server.close();
      }
    });

    // A client that gives up right after sending (a short timeout) while its claim is still on the way: the
    // body parser after the middleware would see a finished request and hand the handler no body, and its 400
    // would be stored for good. In both modes the handler does not run and the key is free for the retry.
    for (const transactional of [false, true]) {
      test(`a client that hangs up during the claim: the handler not run, the key free${transactional ? ' (transactional)' : ''}`, async () => {
        const hungUp = gate();
        const logger = memoryLogger();
        // The pool, except that the claim waits until the client has hung up (and the server has seen it).
        const held = {
          query: async (text, values) => {
            if (String(text).includes('idem_claim')) await hungUp.promise.then(() => sleep(100));
            return pool.query(text, values);
          },
          connect: async () => {
            const client = await pool.connect();
            return new Proxy(client, {
              get: (target, name) => (name === 'query' ? held.query.bind(null) : Reflect.get(target, name)),
            });
          },
        };
        const seen = [];
        const server = await serve(express, (app) => app.post('/', (req, res) => {
          seen.push(req.body);
          res.status(req.body?.amount ? 201 : 400).json({ got: req.body ?? null });
        }), { pool: held, logger, transactional });
        const tenant = fresh('t');
        try {
          const socket = net.connect(server.port, '127.0.0.1');
          await new Promise((resolve) => socket.once('connect', resolve));
          const body = JSON.stringify({ amount: 5 });
          socket.write(`POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Tenant: ${tenant}\r\n`
            + `Idempotency-Key: k\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
          await sleep(100); // the server has read the whole request and is claiming
          socket.destroy();
          hungUp.open();
          for (let i = 0; i < 50 && !logger.lines.length; i += 1) await sleep(20);
          assert.equal(seen.length, 0, 'the handler ran for a client that was gone');
          assert.equal(await lookup(pool, tenant, 'k'), null, 'the key was not released'); // released, then logged
          assert.match(logger.lines.map(([, msg]) => msg).join('\n'), /hung up before the handler ran/);
          const retry = await as(server.port, tenant)('k', { amount: 5 });
          assert.equal(retry.status, 201, retry.raw.toString());
          assert.deepEqual(retry.json(), { got: { amount: 5 } });
          assert.equal(retry.headers['idempotency-outcome'], 'claimed');
        } finally {
          await server.close();
        }
      });
    }
  });
}

describe('the pool as the application set it up', () => {
  let numeric;
  before(() => {
    // An application that parses int8 into numbers: the token still travels as text.
    numeric = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2,
      types: { getTypeParser: (oid, format) => (oid === 20 ? Number : pg.types.getTypeParser(oid, format)) } });
  });
  after(() => numeric.end());

  test('the token is a string even when int8 parses to numbers', async () => {
    const [, express] = EXPRESSES[0];
    const server = await serve(express, (app) => app.post('/', (req, res) => res.json({ token: req.idempotency.token })),
      { pool: numeric, retention: 3600, lease: 30 });
    try {
      const pay = as(server.port, fresh('t'));
      const { token } = (await pay('k', {})).json();
      assert.equal(typeof token, 'string');
      assert.equal((await pay('k', {})).headers['idempotent-replayed'], 'true');
    } finally {
      await server.close();
    }
  });
});
