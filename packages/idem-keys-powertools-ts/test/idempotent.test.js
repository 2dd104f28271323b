// The cases of the issue, through Powertools' own makeIdempotent and IdempotencyConfig, against the database
// in $DATABASE_URL: replay, in progress, validation, expiry, the error that releases the key,
// throwOnNoIdempotencyKey and the local cache. The takeover and its refused late write: fencing.test.js.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  IdempotencyAlreadyInProgressError,
  IdempotencyConfig,
  IdempotencyValidationError,
  makeIdempotent,
} from '@aws-lambda-powertools/idempotency';
import {
  countingPool, databasePool, gate, lambdaContext, layer, named, powertoolsKey, sleep, storedRow,
} from './helpers.js';

let pool;
before(() => { pool = databasePool(); });
after(() => pool.end());

describe('makeIdempotent', () => {
  test('the first call runs; the second returns the stored result without running', async () => {
    const store = layer(pool, 'replay');
    let runs = 0;
    const handler = makeIdempotent(async (event) => {
      runs += 1;
      return { zebra: event.n, apple: [1, 2.50, 'x'], runs };
    }, { persistenceStore: store });

    const first = await handler({ n: 7 }, lambdaContext());
    const second = await handler({ n: 7 }, lambdaContext());
    assert.deepEqual(first, { zebra: 7, apple: [1, 2.5, 'x'], runs: 1 });
    assert.deepEqual(second, first);
    assert.deepEqual(Object.keys(second), ['zebra', 'apple', 'runs'], 'stored as JSON text: the key order is kept');
    assert.equal(runs, 1);

    await handler({ n: 8 }, lambdaContext());
    assert.equal(runs, 2, 'another payload is another key');
  });

  test('what is stored: the result as JSON text, the expiry and payload hash as attributes', async () => {
    const store = layer(pool, 'stored');
    const handler = makeIdempotent(async () => ({ ok: true }), { persistenceStore: store });
    const before = Math.round(Date.now() / 1000);
    await handler({ id: 'o-1' }, lambdaContext());

    const row = await storedRow(pool, store.scope, powertoolsKey('', { id: 'o-1' }));
    assert.equal(row.outcome, 'replay');
    assert.equal(row.status_code, 200);
    assert.equal(row.response, null);
    assert.equal(row.response_bytes.toString('utf8'), '{"ok":true}');
    assert.deepEqual(Object.keys(row.headers).sort(), ['expiration', 'validation']);
    assert.ok(Math.abs(row.headers.expiration - (before + 3600)) <= 2, 'expiresAfterSeconds: 1 hour by default');
    assert.equal(row.headers.validation, '');
  });

  test('a result of undefined, null, a string or a number replays as itself', async () => {
    const store = layer(pool, 'values');
    const results = { a: undefined, b: null, c: 'text', d: 0 };
    let runs = 0;
    const handler = makeIdempotent(async (event) => { runs += 1; return results[event.k]; }, { persistenceStore: store });
    for (const k of Object.keys(results)) {
      assert.equal(await handler({ k }, lambdaContext()), results[k]);
      assert.equal(await handler({ k }, lambdaContext()), results[k]);
    }
    assert.equal(runs, 4);
  });

  test('a concurrent call raises IdempotencyAlreadyInProgressError', async () => {
    const store = layer(pool, 'in-progress');
    const started = gate();
    const finish = gate();
    let runs = 0;
    const handler = makeIdempotent(async () => {
      runs += 1;
      started.open();
      await finish.opened;
      return 'first';
    }, { persistenceStore: store });

    const first = handler({ id: 1 }, lambdaContext());
    await started.opened;
    await assert.rejects(handler({ id: 1 }, lambdaContext()), IdempotencyAlreadyInProgressError);
    finish.open();
    assert.equal(await first, 'first');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'first');
    assert.equal(runs, 1);
  });

  test('two calls of one key in the same tick: one runs, the other is in progress', async () => {
    const store = layer(pool, 'same-tick');
    let runs = 0;
    const handler = makeIdempotent(async () => { runs += 1; await sleep(100); return 'once'; }, { persistenceStore: store });
    const outcomes = await Promise.allSettled([handler({ id: 1 }, lambdaContext()), handler({ id: 1 }, lambdaContext())]);
    assert.deepEqual(outcomes.map((o) => o.status).sort(), ['fulfilled', 'rejected']);
    assert.equal(outcomes.find((o) => o.status === 'rejected').reason.name, 'IdempotencyAlreadyInProgressError');
    assert.equal(runs, 1);
  });

  test('calls of different keys in the same tick each keep their own claim', async () => {
    const store = layer(pool, 'many');
    const handler = makeIdempotent(async (event) => { await sleep(20 * (6 - event.i)); return event.i; }, { persistenceStore: store });
    const results = await Promise.all([1, 2, 3, 4, 5].map((i) => handler({ i }, lambdaContext())));
    assert.deepEqual(results, [1, 2, 3, 4, 5]);
    for (const i of [1, 2, 3, 4, 5]) assert.equal(await handler({ i }, lambdaContext()), i);
  });

  test('with waitSeconds, a concurrent call waits for the first and returns its result', async () => {
    const scope = layer(pool, 'wait').scope;
    const first = layer(pool, 'unused', { scope });
    const waiting = layer(pool, 'unused', { scope, waitSeconds: 10 });
    const started = gate();
    let runs = 0;
    const work = async () => {
      runs += 1;
      started.open();
      await sleep(400);
      return 'from the first';
    };
    const a = makeIdempotent(work, { persistenceStore: first })({ id: 1 }, lambdaContext());
    await started.opened;
    const t0 = Date.now();
    assert.equal(await makeIdempotent(work, { persistenceStore: waiting })({ id: 1 }, lambdaContext()), 'from the first');
    assert.ok(Date.now() - t0 >= 200, 'it waited');
    assert.equal(await a, 'from the first');
    assert.equal(runs, 1);
  });

  test('another payload under the same key raises IdempotencyValidationError (payloadValidationJmesPath)', async () => {
    const store = layer(pool, 'validation');
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'orderId', payloadValidationJmesPath: 'amount' });
    const started = gate();
    const finish = gate();
    let runs = 0;
    const handler = makeIdempotent(async (event) => {
      runs += 1;
      if (event.slow) {
        started.open();
        await finish.opened;
      }
      return { charged: event.amount };
    }, { persistenceStore: store, config });

    // While the first is in progress: the claim's fingerprint is the payload hash, so the database says so.
    const first = handler({ orderId: 'o-1', amount: 10, slow: true }, lambdaContext());
    await started.opened;
    await assert.rejects(handler({ orderId: 'o-1', amount: 20 }, lambdaContext()), IdempotencyValidationError);
    finish.open();
    assert.deepEqual(await first, { charged: 10 });

    // Finished: a field outside the validation path does not matter, the amount does.
    assert.deepEqual(await handler({ orderId: 'o-1', amount: 10, note: 'retry' }, lambdaContext()), { charged: 10 });
    await assert.rejects(handler({ orderId: 'o-1', amount: 20 }, lambdaContext()), IdempotencyValidationError);
    // A fresh layer (no local state at all) on the same scope sees the same.
    const other = layer(pool, 'unused', { scope: store.scope });
    const again = makeIdempotent(async () => { runs += 1; }, { persistenceStore: other, config });
    await assert.rejects(again({ orderId: 'o-1', amount: 20 }, lambdaContext()), IdempotencyValidationError);
    assert.deepEqual(await again({ orderId: 'o-1', amount: 10 }, lambdaContext()), { charged: 10 });
    assert.equal(runs, 1);
  });

  test('without payloadValidationJmesPath, the same key replays whatever the rest of the payload', async () => {
    const store = layer(pool, 'no-validation');
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'orderId' });
    let runs = 0;
    const handler = makeIdempotent(async (event) => { runs += 1; return event.amount; }, { persistenceStore: store, config });
    assert.equal(await handler({ orderId: 'o-1', amount: 10 }, lambdaContext()), 10);
    assert.equal(await handler({ orderId: 'o-1', amount: 20 }, lambdaContext()), 10);
    assert.equal(runs, 1);
  });

  test('a record past its expiry (expiresAfterSeconds) runs again', async () => {
    const store = layer(pool, 'expiry');
    // Powertools rounds the expiry to the second: 2 s is between 1.5 and 2.5.
    const config = new IdempotencyConfig({ expiresAfterSeconds: 2 });
    let runs = 0;
    const handler = makeIdempotent(async () => { runs += 1; return runs; }, { persistenceStore: store, config });
    assert.equal(await handler({ id: 1 }, lambdaContext()), 1);
    assert.equal(await handler({ id: 1 }, lambdaContext()), 1);
    await sleep(2700);
    assert.equal(await handler({ id: 1 }, lambdaContext()), 2);
    assert.equal(await handler({ id: 1 }, lambdaContext()), 2);
  });

  test("the function's error releases the key: it is raised as it is, and the next call runs", async () => {
    const store = layer(pool, 'error');
    const failure = new Error('card declined');
    let runs = 0;
    const handler = makeIdempotent(async () => {
      runs += 1;
      if (runs === 1) throw failure;
      return 'charged';
    }, { persistenceStore: store });
    await assert.rejects(handler({ id: 1 }, lambdaContext()), (error) => error === failure);
    assert.equal(await storedRow(pool, store.scope, powertoolsKey('', { id: 1 })).then((r) => r.outcome), null,
      'nothing left in progress');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'charged');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'charged');
    assert.equal(runs, 2);
  });

  test('throwOnNoIdempotencyKey: a payload without the key raises, and the function does not run', async () => {
    const store = layer(pool, 'no-key');
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'headers."Idempotency-Key"', throwOnNoIdempotencyKey: true });
    let runs = 0;
    const handler = makeIdempotent(async () => { runs += 1; return 'ran'; }, { persistenceStore: store, config });
    // Powertools raises its IdempotencyKeyError from the in-progress save, wrapped as that save's failure.
    await assert.rejects(handler({ headers: {} }, lambdaContext()), (error) => {
      assert.equal(error.name, 'IdempotencyPersistenceLayerError');
      assert.equal(error.cause?.name, 'IdempotencyKeyError');
      return true;
    });
    assert.equal(runs, 0);
    assert.equal(await handler({ headers: { 'Idempotency-Key': 'k-1' } }, lambdaContext()), 'ran');
    assert.equal(await handler({ headers: { 'Idempotency-Key': 'k-1' } }, lambdaContext()), 'ran');
    assert.equal(runs, 1);
  });

  test('without throwOnNoIdempotencyKey, a payload without the key runs every time, without the database', async () => {
    const counted = countingPool(pool);
    const store = layer(counted, 'no-key-lenient');
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'headers."Idempotency-Key"' });
    let runs = 0;
    const handler = makeIdempotent(async () => { runs += 1; return runs; }, { persistenceStore: store, config });
    assert.equal(await handler({ headers: {} }, lambdaContext()), 1);
    assert.equal(await handler({ headers: {} }, lambdaContext()), 2);
    assert.equal(counted.queries, 0);
  });

  test('the local cache answers a repeat without the database, and forgets it at the expiry', async () => {
    const counted = countingPool(pool);
    const store = layer(counted, 'cache');
    const config = new IdempotencyConfig({ useLocalCache: true, expiresAfterSeconds: 2 });
    let runs = 0;
    const handler = makeIdempotent(async () => { runs += 1; return runs; }, { persistenceStore: store, config });
    assert.equal(await handler({ id: 1 }, lambdaContext()), 1);
    assert.equal(counted.queries, 2, 'idem_claim and idem_finish');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 1);
    assert.equal(await handler({ id: 1 }, lambdaContext()), 1);
    assert.equal(counted.queries, 2, 'answered from the cache');
    await sleep(2700);
    assert.equal(await handler({ id: 1 }, lambdaContext()), 2);
    assert.equal(counted.queries, 4);
  });

  test('the local cache keeps a result replayed from the database, until its stored expiry', async () => {
    const scope = layer(pool, 'cache-replayed').scope;
    const config = new IdempotencyConfig({ expiresAfterSeconds: 2 });
    let runs = 0;
    const work = async () => { runs += 1; return runs; };
    // Another instance (another Lambda environment) ran it.
    await makeIdempotent(work, { persistenceStore: layer(pool, 'unused', { scope }), config })({ id: 1 }, lambdaContext());

    const counted = countingPool(pool);
    const cached = makeIdempotent(work, {
      persistenceStore: layer(counted, 'unused', { scope }),
      config: new IdempotencyConfig({ useLocalCache: true, expiresAfterSeconds: 2 }),
    });
    assert.equal(await cached({ id: 1 }, lambdaContext()), 1);
    assert.equal(counted.queries, 1, 'one idem_claim: replay');
    assert.equal(await cached({ id: 1 }, lambdaContext()), 1);
    assert.equal(counted.queries, 1, 'answered from the cache');
    await sleep(2700);
    assert.equal(await cached({ id: 1 }, lambdaContext()), 2);
    assert.equal(runs, 2);
  });

  test('the local cache never holds an in-progress record', async () => {
    const counted = countingPool(pool);
    const store = layer(counted, 'cache-in-progress');
    const config = new IdempotencyConfig({ useLocalCache: true });
    const started = gate();
    const finish = gate();
    const handler = makeIdempotent(async () => { started.open(); await finish.opened; return 'done'; }, { persistenceStore: store, config });
    const first = handler({ id: 1 }, lambdaContext());
    await started.opened;
    await assert.rejects(handler({ id: 1 }, lambdaContext()), named('IdempotencyAlreadyInProgressError'));
    finish.open();
    assert.equal(await first, 'done');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'done');
  });
});
