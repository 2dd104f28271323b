// Connections that die under the middleware, against a real idem_keys ($DATABASE_URL): a COMMIT whose answer never
// arrives (503 commit-unknown), one already lost before its COMMIT (503 commit-failed), and the pool's sessions
// terminated mid-run, as a PostgreSQL restart or a failover
// ends them, in both modes. The pools here carry an application_name of their own, and only their sessions are
// terminated.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { idempotency, releaseOnError } from 'idem-keys-express';
import { problem } from '../src/problems.cjs';
import { commitRolledBack } from '../src/transaction.cjs';
import { EXPRESSES, databasePool, fresh, gate, listen, lookup, memoryLogger, post } from './helpers.js';

const observer = databasePool();
const pools = [];
after(() => Promise.all([observer, ...pools].map((p) => p.end())));

const WRITES = 'express_loss_writes';
const DOOMED = 'express_loss_doomed'; // a row inserted here ends its session when its transaction commits

before(async () => {
  await observer.query(`CREATE TABLE IF NOT EXISTS ${WRITES} (tenant text NOT NULL, key text NOT NULL, note text)`);
  await observer.query(`CREATE TABLE IF NOT EXISTS ${DOOMED} (note text)`);
  // Deferred to COMMIT, where the session terminates itself: the COMMIT's answer is a FATAL 57P01 and a closed
  // connection, and nothing was committed.
  await observer.query(`CREATE OR REPLACE FUNCTION ${DOOMED}_die() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$`);
  await observer.query(`DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgname = '${DOOMED}_at_commit') THEN
      CREATE CONSTRAINT TRIGGER ${DOOMED}_at_commit AFTER INSERT ON ${DOOMED} DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION ${DOOMED}_die();
    END IF; END $$`);
});

// A pool whose sessions this test may terminate. node-postgres needs the 'error' listener: an idle client whose
// session ends emits it, and the pool drops that client.
function namedPool(name, max) {
  const made = new pg.Pool({ connectionString: process.env.DATABASE_URL, max, application_name: name,
    connectionTimeoutMillis: 3000 });
  made.on('error', () => {});
  pools.push(made);
  return made;
}

// Terminates every session of the pool named name, waiting for each to end; how many there were.
async function terminate(name) {
  // Materialized: the name filter runs first, so no other session is ever signalled.
  const { rows } = await observer.query(`WITH named AS MATERIALIZED (
      SELECT pid FROM pg_stat_activity WHERE application_name = $1)
    SELECT count(*)::int AS n FROM named WHERE pg_terminate_backend(pid, 5000)`, [name]);
  return rows[0].n;
}

async function writes(tenant, key) {
  const { rows } = await observer.query(`SELECT note FROM ${WRITES} WHERE tenant = $1 AND key = $2`, [tenant, key]);
  return rows.map((r) => r.note);
}

async function serve(express, pool, transactional, handler, logger = memoryLogger()) {
  const app = express();
  app.set('env', 'test');
  app.use(idempotency({ pool, transactional, scope: (req) => req.get('X-Tenant'), outcomeHeader: 'Idempotency-Outcome',
    logger }));
  app.use(express.json());
  app.post('/', handler);
  app.use(releaseOnError());
  return listen(app);
}

const as = (port, tenant) => (key, headers = []) => post(port, key, {}, { headers: [['X-Tenant', tenant], ...headers] });

// The handler's write: on the transaction's client, or on the pool by default. A failed write answers 503, which
// releases the key (rolls the transaction back), as a handler does when its database went away.
function writingHandler(pool, hold) {
  return async (req, res) => {
    const { client, scope, key } = req.idempotency;
    if (req.get('X-Hold')) {
      hold.entered.open();
      await hold.released.promise;
    }
    try {
      await (client ?? pool).query(`INSERT INTO ${WRITES} (tenant, key, note) VALUES ($1, $2, 'paid')`, [scope, key]);
    } catch (err) {
      res.status(503).set('Retry-After', '1').json({ error: err.message });
      return;
    }
    res.status(201).json({ ok: true });
  };
}

test('which COMMIT errors prove that nothing was committed', () => {
  const server = (code, severity = 'ERROR') => Object.assign(new Error(code), { code, severity });
  for (const err of [server('23505'), server('40001'), server('25P02'), server('57014'), server('25P03', 'FATAL')]) {
    assert.equal(commitRolledBack(err), true, err.message);
  }
  const unknown = [server('08006', 'FATAL'), server('08003'), server('57P01', 'FATAL'), server('57P02', 'FATAL'),
    server('57P03', 'FATAL'), server('XX000', 'PANIC'), server('58030', 'PANIC'), new Error('Connection terminated unexpectedly'), new Error('Query read timeout'),
    Object.assign(new Error('write EPIPE'), { code: 'EPIPE', errno: -32, syscall: 'write' }),
    Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }), undefined];
  for (const err of unknown) assert.equal(commitRolledBack(err), false, String(err?.message));
});

for (const [name, express] of EXPRESSES) {
  describe(`${name}, connections lost`, () => {
    test('a COMMIT whose answer never comes: 503 commit-unknown; the retry runs afresh, one row; the pool serves on', async () => {
      const appName = fresh('idem-express-commit');
      const pool = namedPool(appName, 1);
      const logger = memoryLogger();
      let calls = 0;
      const server = await serve(express, pool, true, async (req, res) => {
        calls += 1;
        const { client, scope, key } = req.idempotency;
        await client.query(`INSERT INTO ${WRITES} (tenant, key, note) VALUES ($1, $2, 'paid')`, [scope, key]);
        if (calls === 1) await client.query(`INSERT INTO ${DOOMED} VALUES ('dies at COMMIT')`);
        res.status(201).json({ calls });
      }, logger);
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const unknown = await pay('k');
        assert.equal(unknown.status, 503, unknown.raw.toString());
        assert.deepEqual(unknown.raw, problem('commit-unknown').body, 'the bytes every middleware sends');
        assert.equal(unknown.headers['content-type'], 'application/problem+json');
        assert.equal(unknown.headers['retry-after'], '1');
        assert.equal(unknown.headers['idempotency-outcome'], 'claimed');
        const logged = logger.lines.map(([, message]) => message).join('\n');
        assert.match(logged, /COMMIT for "k".*outcome is unknown.*retry with the same Idempotency-Key/s);
        assert.deepEqual(await writes(tenant, 'k'), [], 'nothing committed');
        assert.equal(await lookup(observer, tenant, 'k'), null);
        const retried = await pay('k');
        assert.deepEqual([retried.status, retried.headers['idempotency-outcome']], [201, 'claimed'], retried.raw.toString());
        assert.deepEqual(await writes(tenant, 'k'), ['paid'], 'the retry\'s write, once');
        assert.equal((await pay('k2')).status, 201);
        assert.equal(pool.idleCount, pool.totalCount, 'every client back in the pool');
      } finally {
        await server.close();
      }
    });

    // The handler leaves the key unsettled, so that the COMMIT comes with no idem_finish before it (a finish on the
    // lost client fails first: 500 store-failed).
    test('a connection lost before the COMMIT: not sent, 503 commit-failed; the retry runs afresh, one row', async () => {
      const appName = fresh('idem-express-lost');
      const pool = namedPool(appName, 1);
      const logger = memoryLogger();
      let calls = 0;
      const server = await serve(express, pool, true, async (req, res) => {
        calls += 1;
        const { client, scope, key, leaveUnsettled } = req.idempotency;
        await client.query(`INSERT INTO ${WRITES} (tenant, key, note) VALUES ($1, $2, 'paid')`, [scope, key]);
        if (calls === 1) {
          // The session ends while the handler holds the client; pg tells the client, which emits 'error'.
          const seen = new Promise((resolve) => { client.once('error', resolve); });
          assert.equal(await terminate(appName), 1, 'the handler\'s session');
          await seen;
          leaveUnsettled();
        }
        res.status(201).json({ calls });
      }, logger);
      const tenant = fresh('t');
      const pay = as(server.port, tenant);
      try {
        const failed = await pay('k');
        assert.equal(failed.status, 503, failed.raw.toString());
        assert.equal(failed.raw.toString(), problem('commit-failed').body.toString());
        assert.equal(failed.headers['retry-after'], '1');
        assert.equal(failed.headers['idempotency-outcome'], 'claimed');
        const logged = logger.lines.map(([, message]) => message).join('\n');
        assert.match(logged, /COMMIT for "k".*the connection was lost before the COMMIT: nothing was committed/s);
        assert.deepEqual(await writes(tenant, 'k'), [], 'nothing committed');
        assert.equal(await lookup(observer, tenant, 'k'), null);
        const retried = await pay('k');
        assert.deepEqual([retried.status, retried.headers['idempotency-outcome']], [201, 'claimed'], retried.raw.toString());
        assert.deepEqual(await writes(tenant, 'k'), ['paid'], 'the retry\'s write, once');
        assert.equal(pool.idleCount, pool.totalCount, 'every client back in the pool');
      } finally {
        await server.close();
      }
    });

    for (const transactional of [false, true]) {
      const mode = transactional ? 'transactional' : 'default mode';
      test(`the pool's sessions terminated mid-run (${mode}): new keys get 201 again, one row each`, async () => {
        const appName = fresh('idem-express-restart');
        const pool = namedPool(appName, 2);
        const hold = { entered: gate(), released: gate() };
        const server = await serve(express, pool, transactional, writingHandler(pool, hold));
        const tenant = fresh('t');
        const pay = as(server.port, tenant);
        try {
          const warm = await Promise.all([pay('w1'), pay('w2')]);
          assert.deepEqual(warm.map((r) => r.status), [201, 201]);

          // A request inside its handler (in transactional mode holding its client, idle in its transaction) when
          // every session of the pool is terminated.
          const held = pay('held', [['X-Hold', '1']]);
          await hold.entered.promise;
          assert.ok(await terminate(appName) >= 1, 'the pool\'s sessions were there to terminate');
          hold.released.open();
          const heldReply = await held;
          assert.ok([201, 500, 503].includes(heldReply.status), `held: ${heldReply.status} ${heldReply.raw}`);
          assert.equal((await writes(tenant, 'held')).length, heldReply.status === 201 ? 1 : 0);

          // New keys: a few 503s while dead clients are found and dropped, then 201s, each with one row.
          const statuses = [];
          for (let i = 0; i < 10 && statuses.slice(-3).join() !== '201,201,201'; i += 1) {
            const reply = await pay(`after-${i}`);
            statuses.push(reply.status);
            assert.ok([201, 503].includes(reply.status), `after-${i}: ${reply.status} ${reply.raw}`);
            assert.equal((await writes(tenant, `after-${i}`)).length, reply.status === 201 ? 1 : 0, `after-${i}`);
          }
          assert.deepEqual(statuses.slice(-3), [201, 201, 201], `answers after the sessions ended: ${statuses}`);
          assert.equal(pool.idleCount, pool.totalCount, 'every client back in the pool');
        } finally {
          hold.released.open();
          await server.close();
        }
      });
    }
  });
}
