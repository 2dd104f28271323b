// The fencing: the Lambda's remaining time is the claim's lease; after it another invocation takes the key
// over, and the timed-out invocation's late write is refused (55000) instead of replacing the new owner's
// record. Also how the token finds its way from the in-progress save to the update of the same invocation:
// primitive payloads, nested idempotent functions, the idempotent decorator. Last, the lease itself: the
// remaining time with a Lambda context, leaseSeconds without one.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  IdempotencyAlreadyInProgressError,
  IdempotencyConfig,
  IdempotencyValidationError,
  idempotent,
  makeIdempotent,
} from '@aws-lambda-powertools/idempotency';
import { IdempotencyClaimMissingError, IdempotencyLeaseLostError } from '../index.js';
import { databasePool, gate, lambdaContext, layer, powertoolsKey, sleep, storedRow } from './helpers.js';

let pool;
before(() => { pool = databasePool(); });
after(() => pool.end());

const LEASE_MS = 800; // the timed-out invocation's remaining time

// Powertools wraps what the update raised: IdempotencyPersistenceLayerError, caused by ours, caused by pg's.
function refusedLateWrite(error) {
  assert.equal(error.name, 'IdempotencyPersistenceLayerError');
  assert.equal(error.message, 'Failed to update success record to idempotency store');
  assert.ok(error.cause instanceof IdempotencyLeaseLostError, `cause: ${error.cause}`);
  assert.equal(error.cause.code, '55000');
  assert.equal(error.cause.cause.code, '55000');
  assert.match(error.cause.message, /taken over by another invocation/);
  return true;
}

describe('fencing', () => {
  test('a timed-out invocation is taken over; its late write is refused and the new result kept', async () => {
    const store = layer(pool, 'takeover');
    const started = gate();
    const late = gate();
    const runs = [];
    const handler = makeIdempotent(async (event, context) => {
      runs.push(context.name);
      if (context.name === 'timed out') {
        started.open();
        await late.opened;
      }
      return `result of ${context.name}`;
    }, { persistenceStore: store });

    const timedOut = handler({ id: 1 }, lambdaContext(LEASE_MS, { name: 'timed out' }));
    await started.opened;
    // Within its remaining time the key is in progress,
    await assert.rejects(handler({ id: 1 }, lambdaContext(60_000, { name: 'too early' })), IdempotencyAlreadyInProgressError);
    await sleep(LEASE_MS + 300);
    // and after it, the next invocation takes it over and runs.
    assert.equal(await handler({ id: 1 }, lambdaContext(60_000, { name: 'new owner' })), 'result of new owner');
    assert.equal((await storedRow(pool, store.scope, powertoolsKey('', { id: 1 }))).attempt, 2, 'a recovered claim');

    late.open();
    await assert.rejects(timedOut, refusedLateWrite);
    assert.equal(await handler({ id: 1 }, lambdaContext(60_000, { name: 'retry' })), 'result of new owner');
    assert.deepEqual(runs, ['timed out', 'new owner']);
  });

  // Two invocations of one key, each held at its start until the test lets it go: the timed-out one, then,
  // past its lease, the new owner. The timed-out one is let go first, its outcome checked by lateOutcome while
  // the new owner still holds the key; then the new owner finishes and its result is the key's.
  async function takeoverWhileTheOwnerRuns(scope, lateFails, lateOutcome) {
    const store = layer(pool, scope);
    const started = { 'timed out': gate(), 'new owner': gate() };
    const release = { 'timed out': gate(), 'new owner': gate() };
    const handler = makeIdempotent(async (event, context) => {
      started[context.name].open();
      await release[context.name].opened;
      if (lateFails && context.name === 'timed out') throw lateFails;
      return context.name;
    }, { persistenceStore: store });

    const timedOut = handler({ id: 1 }, lambdaContext(LEASE_MS, { name: 'timed out' }));
    await started['timed out'].opened;
    await sleep(LEASE_MS + 300);
    const owner = handler({ id: 1 }, lambdaContext(60_000, { name: 'new owner' }));
    await started['new owner'].opened;
    release['timed out'].open();
    await assert.rejects(timedOut, lateOutcome);
    await assert.rejects(handler({ id: 1 }, lambdaContext()), IdempotencyAlreadyInProgressError, 'still the new owner\'s');
    release['new owner'].open();
    assert.equal(await owner, 'new owner');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'new owner');
  }

  test('a late write is refused even when the new owner has not finished yet, and the new owner still finishes', async () => {
    await takeoverWhileTheOwnerRuns('takeover-open', undefined, refusedLateWrite);
  });

  test("a timed-out invocation's late error raises itself and leaves the new owner's claim alone", async () => {
    const failure = new Error('provider timeout');
    await takeoverWhileTheOwnerRuns('takeover-error', failure, (error) => error === failure);
  });

  test('a timed-out claim is taken over only with the same payload (payloadValidationJmesPath)', async () => {
    const store = layer(pool, 'takeover-validation');
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'orderId', payloadValidationJmesPath: 'amount' });
    const started = gate();
    const late = gate();
    const handler = makeIdempotent(async (event, context) => {
      if (context.name === 'timed out') {
        started.open();
        await late.opened;
      }
      return event.amount;
    }, { persistenceStore: store, config });
    const timedOut = handler({ orderId: 'o-1', amount: 10 }, lambdaContext(LEASE_MS, { name: 'timed out' }));
    await started.opened;
    await sleep(LEASE_MS + 300);
    await assert.rejects(handler({ orderId: 'o-1', amount: 20 }, lambdaContext()), IdempotencyValidationError);
    assert.equal(await handler({ orderId: 'o-1', amount: 10 }, lambdaContext()), 10);
    late.open();
    await assert.rejects(timedOut, refusedLateWrite);
  });

  test('without a Lambda context, a claim is taken over after leaseSeconds; the late write is refused', async () => {
    const store = layer(pool, 'no-context', { leaseSeconds: 1 });
    const started = gate();
    const late = gate();
    let runs = 0;
    const charge = makeIdempotent(async (orderId) => {
      runs += 1;
      if (runs === 1) {
        started.open();
        await late.opened;
      }
      return `charged ${orderId} (run ${runs})`;
    }, { persistenceStore: store });
    await quietly(async () => {
      const first = charge('o-1');
      await started.opened;
      await assert.rejects(charge('o-1'), IdempotencyAlreadyInProgressError);
      await sleep(1300);
      assert.equal(await charge('o-1'), 'charged o-1 (run 2)');
      late.open();
      await assert.rejects(first, refusedLateWrite);
    });
  });

  test('a primitive payload (a string) is fenced too: the claim follows the async context', async () => {
    const store = layer(pool, 'primitive');
    const config = new IdempotencyConfig({});
    const started = gate();
    const late = gate();
    let runs = 0;
    // Not a handler: the payload is the first argument, a string; the remaining time comes from the registered context.
    const charge = makeIdempotent(async (orderId, amount) => {
      runs += 1;
      if (runs === 1) {
        started.open();
        await late.opened;
      }
      return { orderId, amount, run: runs };
    }, { persistenceStore: store, config, dataIndexArgument: 0 });

    config.registerLambdaContext(lambdaContext(LEASE_MS));
    const timedOut = charge('o-1', 10);
    await started.opened;
    await sleep(LEASE_MS + 300);
    config.registerLambdaContext(lambdaContext(60_000));
    assert.deepEqual(await charge('o-1', 10), { orderId: 'o-1', amount: 10, run: 2 });
    late.open();
    await assert.rejects(timedOut, refusedLateWrite);
    assert.deepEqual(await charge('o-1', 99), { orderId: 'o-1', amount: 10, run: 2 });
  });

  test('the same payload object in two invocations: each finishes with its own claim', async () => {
    const store = layer(pool, 'same-object');
    const started = gate();
    const late = gate();
    const event = { id: 1 };
    const handler = makeIdempotent(async (e, context) => {
      if (context.name === 'timed out') {
        started.open();
        await late.opened;
      }
      return context.name;
    }, { persistenceStore: store });
    const timedOut = handler(event, lambdaContext(LEASE_MS, { name: 'timed out' }));
    await started.opened;
    await sleep(LEASE_MS + 300);
    assert.equal(await handler(event, lambdaContext(60_000, { name: 'new owner' })), 'new owner');
    late.open();
    await assert.rejects(timedOut, refusedLateWrite);
    assert.equal(await handler(event, lambdaContext()), 'new owner');
  });

  test('an idempotent function called from inside another, on the same layer: each finishes with its own claim', async () => {
    // One layer and no keyPrefix for both (Powertools sets the prefix on the layer at every call, so functions
    // with different prefixes need a layer each), string payloads: only the async context tells the claims apart.
    const store = layer(pool, 'nested');
    const config = new IdempotencyConfig({});
    config.registerLambdaContext(lambdaContext());
    let inner = 0;
    let outer = 0;
    const reserve = makeIdempotent(async (sku) => { inner += 1; await sleep(10); return `reserved ${sku}`; },
      { persistenceStore: store, config });
    const placeOrder = makeIdempotent(async (orderId, sku) => {
      outer += 1;
      const reservation = reserve(sku); // called before the function's first await
      return { orderId, reservation: await reservation };
    }, { persistenceStore: store, config, dataIndexArgument: 0 });
    const expected = { orderId: 'o-1', reservation: 'reserved s-1' };
    assert.deepEqual(await placeOrder('o-1', 's-1'), expected);
    assert.deepEqual(await placeOrder('o-1', 's-1'), expected);
    assert.equal(await reserve('s-1'), 'reserved s-1');
    assert.deepEqual([outer, inner], [1, 1]);
  });

  test('the idempotent decorator (Powertools\' class method decorator)', async () => {
    const store = layer(pool, 'decorator');
    let runs = 0;
    class Orders {
      constructor() { this.prefix = 'order'; }

      async handler(event) {
        runs += 1;
        return `${this.prefix} ${event.id}`;
      }
    }
    // What TypeScript's decorator emit does with @idempotent({ persistenceStore: store }) on handler.
    const descriptor = Object.getOwnPropertyDescriptor(Orders.prototype, 'handler');
    Object.defineProperty(Orders.prototype, 'handler', idempotent({ persistenceStore: store })(Orders.prototype, 'handler', descriptor));
    const orders = new Orders();
    assert.equal(await orders.handler({ id: 1 }, lambdaContext()), 'order 1');
    assert.equal(await orders.handler({ id: 1 }, lambdaContext()), 'order 1');
    assert.equal(runs, 1);
  });

  test('an update with no claim of its invocation is refused, not guessed; a delete with none releases nothing', async () => {
    const store = layer(pool, 'no-claim');
    store.configure({ config: new IdempotencyConfig({}) });
    await assert.rejects(store.saveSuccess({ id: 1 }, 'result'), IdempotencyClaimMissingError);
    await store.deleteRecord({ id: 1 });
  });
});

// The claim's lease as the database has it, read inside the function: idem_lookup's retry_after, the whole
// seconds left on it, rounded up. No test here waits for a lease to end.
describe('the lease', () => {
  async function leaseSeen(options, config, call) {
    const store = layer(pool, 'lease', options);
    let seen;
    const work = async (payload) => {
      seen = (await storedRow(pool, store.scope, powertoolsKey('', payload))).retry_after;
      return 'done';
    };
    await quietly(() => call(makeIdempotent(work, { persistenceStore: store, config })));
    return seen;
  }

  test('with a Lambda context, the lease is its remaining time, whatever leaseSeconds says', async () => {
    const seen = await leaseSeen({ leaseSeconds: 5 }, undefined, (handler) => handler({ id: 1 }, lambdaContext(20_000)));
    assert.ok(seen >= 19 && seen <= 20, `retry_after ${seen}`);
  });

  test('without a Lambda context, the lease is leaseSeconds: 60 by default', async () => {
    const seen = await leaseSeen({}, undefined, (charge) => charge({ id: 1 }));
    assert.ok(seen >= 59 && seen <= 60, `retry_after ${seen}`);
  });

  test('without a Lambda context, the lease is leaseSeconds when given', async () => {
    const seen = await leaseSeen({ leaseSeconds: 7 }, undefined, (charge) => charge({ id: 1 }));
    assert.ok(seen >= 6 && seen <= 7, `retry_after ${seen}`);
  });

  test('a remaining time of 0, which Powertools takes for none, is leaseSeconds too', async () => {
    const seen = await leaseSeen({ leaseSeconds: 7 }, undefined, (handler) => handler({ id: 1 }, lambdaContext(0)));
    assert.ok(seen >= 6 && seen <= 7, `retry_after ${seen}`);
  });

  test('leaseSeconds goes no further than the record expiry (expiresAfterSeconds)', async () => {
    const config = new IdempotencyConfig({ expiresAfterSeconds: 30 });
    const seen = await leaseSeen({ leaseSeconds: 120 }, config, (charge) => charge({ id: 1 }));
    assert.ok(seen >= 29 && seen <= 31, `retry_after ${seen}`); // the expiry is rounded to the second
  });
});

// Runs fn with console.warn silenced: Powertools warns at each claim that has no remaining time to go by,
// which is what these tests do on purpose.
async function quietly(fn) {
  const warn = console.warn;
  console.warn = () => {};
  try {
    return await fn();
  } finally {
    console.warn = warn;
  }
}
