// Powertools' Middy middleware (makeHandlerIdempotent) on the layer, first in the chain and after another
// before hook that awaits (then Middy runs the after and onError hooks outside the async context of the
// before hook, and the claim is found through the event object).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import middy from '@middy/core';
import { IdempotencyAlreadyInProgressError, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { makeHandlerIdempotent } from '@aws-lambda-powertools/idempotency/middleware';
import { IdempotencyLeaseLostError } from '../index.js';
import { databasePool, gate, lambdaContext, layer, powertoolsKey, sleep, storedRow } from './helpers.js';

let pool;
before(() => { pool = databasePool(); });
after(() => pool.end());

// A before hook of another middleware that awaits before the idempotency one runs (a parser, a secrets fetch).
const slowBefore = () => ({ before: async () => { await sleep(5); } });

const CHAINS = [
  ['first in the chain', (handler) => handler],
  ['after a before hook that awaits', (handler) => handler.use(slowBefore())],
];

for (const [placement, chain] of CHAINS) {
  describe(`Middy, idempotency ${placement}`, () => {
    // timeoutEarlyInMillis 0: Middy does not end the handler early, so that a late write can happen.
    const build = (store, work) => chain(middy(work, { timeoutEarlyInMillis: 0 }))
      .use(makeHandlerIdempotent({ persistenceStore: store }));

    test('the first call runs; the second returns the stored result without running', async () => {
      const store = layer(pool, 'middy');
      let runs = 0;
      const handler = build(store, async (event) => { runs += 1; return { order: event.id, runs }; });
      assert.deepEqual(await handler({ id: 'o-1' }, lambdaContext()), { order: 'o-1', runs: 1 });
      assert.deepEqual(await handler({ id: 'o-1' }, lambdaContext()), { order: 'o-1', runs: 1 });
      assert.equal(runs, 1);
    });

    test("the function's error releases the key; a concurrent call's in-progress error releases nothing", async () => {
      const store = layer(pool, 'middy-error');
      const started = gate();
      const finish = gate();
      let runs = 0;
      const handler = build(store, async (event) => {
        runs += 1;
        if (runs === 1) throw new Error('declined');
        started.open();
        await finish.opened;
        return 'charged';
      });
      await assert.rejects(handler({ id: 1 }, lambdaContext()), { message: 'declined' });
      const running = handler({ id: 1 }, lambdaContext());
      await started.opened;
      // Middy's onError hook asks the layer to delete the record after this error too; the claim is the
      // running call's, not this one's, so it stays.
      await assert.rejects(handler({ id: 1 }, lambdaContext()), IdempotencyAlreadyInProgressError);
      assert.equal((await storedRow(pool, store.scope, powertoolsKey('', { id: 1 }))).outcome, 'in_progress');
      finish.open();
      assert.equal(await running, 'charged');
      assert.equal(await handler({ id: 1 }, lambdaContext()), 'charged');
      assert.equal(runs, 2);
    });

    test("a timed-out invocation's late write is refused and the new owner's result kept", async () => {
      const store = layer(pool, 'middy-takeover');
      const started = gate();
      const late = gate();
      const handler = build(store, async (event, context) => {
        if (context.name === 'timed out') {
          started.open();
          await late.opened;
        }
        return context.name;
      });
      const timedOut = handler({ id: 1 }, lambdaContext(800, { name: 'timed out' }));
      await started.opened;
      await sleep(1100);
      assert.equal(await handler({ id: 1 }, lambdaContext(60_000, { name: 'new owner' })), 'new owner');
      late.open();
      // The update fails; Middy then runs the onError hooks, whose delete releases nothing (the claim is lost)
      // and raises nothing, so the caller gets the update's error.
      await assert.rejects(timedOut, (error) => {
        assert.equal(error.originalError, undefined);
        assert.equal(error.name, 'IdempotencyPersistenceLayerError');
        assert.ok(error.cause instanceof IdempotencyLeaseLostError);
        assert.equal(error.cause.code, '55000');
        return true;
      });
      assert.equal(await handler({ id: 1 }, lambdaContext()), 'new owner');
    });
  });
}

test("Middy's own early timeout: the abandoned call's key is released and the next call runs", async () => {
  const store = layer(pool, 'middy-timeout');
  let runs = 0;
  const handler = middy(async () => {
    runs += 1;
    if (runs === 1) await sleep(1500); // Middy gives up on it at 300 - 5 ms
    return `run ${runs}`;
  }).use(makeHandlerIdempotent({ persistenceStore: store }));
  await assert.rejects(handler({ id: 1 }, lambdaContext(300)), { name: 'TimeoutError' });
  assert.equal(await handler({ id: 1 }, lambdaContext()), 'run 2');
  assert.equal(await handler({ id: 1 }, lambdaContext()), 'run 2');
});

test('an async context left behind by another call of the same layer is not taken for the hook\'s own', async () => {
  // makeIdempotent enters its invocation into the caller's context (here, this test's); a Middy call made later
  // from the same context runs its after hook there. That invocation tried the same key, with another event
  // object: the hook must find its own claim through its event, not stop at the other's.
  const store = layer(pool, 'middy-left-behind');
  const started = gate();
  const fail = gate();
  let runs = 0;
  const handler = middy(async () => {
    runs += 1;
    if (runs === 1) {
      started.open();
      await fail.opened;
      throw new Error('first attempt failed');
    }
    return 'second attempt';
  }, { timeoutEarlyInMillis: 0 }).use(slowBefore()).use(makeHandlerIdempotent({ persistenceStore: store }));
  const first = handler({ id: 1 }, lambdaContext());
  await started.opened;
  const direct = makeIdempotent(async () => 'never runs', { persistenceStore: store });
  await assert.rejects(direct({ id: 1 }, lambdaContext()), IdempotencyAlreadyInProgressError);
  fail.open();
  await assert.rejects(first, { message: 'first attempt failed' });
  assert.equal(await handler({ id: 1 }, lambdaContext()), 'second attempt');
  assert.equal(await direct({ id: 1 }, lambdaContext()), 'second attempt');
});
