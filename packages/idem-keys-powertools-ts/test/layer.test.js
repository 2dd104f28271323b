// The layer's own surface: its options, the key mapping, and that the database is the edition test.sh says.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import middy from '@middy/core';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { makeHandlerIdempotent } from '@aws-lambda-powertools/idempotency/middleware';
import { IdemKeysPersistenceLayer, IdempotencyClaimMissingError, storeKey } from '../index.js';
import { databasePool, lambdaContext, layer, powertoolsKey, storedRow } from './helpers.js';

let pool;
before(() => { pool = databasePool(); });
after(() => pool.end());

describe('options', () => {
  test('pool and scope are required; there is no default scope', () => {
    assert.throws(() => new IdemKeysPersistenceLayer(), /`pool` is required/);
    assert.throws(() => new IdemKeysPersistenceLayer({ scope: 'orders' }), /`pool` is required/);
    assert.throws(() => new IdemKeysPersistenceLayer({ pool }), /`scope` is required/);
    assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: '' }), /`scope` is required/);
    assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 42 }), /`scope` is required/);
    assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 'é'.repeat(256) }), /256 characters long/);
    assert.equal(new IdemKeysPersistenceLayer({ pool, scope: 'é'.repeat(255) }).scope, 'é'.repeat(255));
    assert.equal(new IdemKeysPersistenceLayer({ pool: new pg.Pool(), scope: 'orders' }).scope, 'orders');
    assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 'orders', expiresAfterSeconds: 60 }),
      /unknown option expiresAfterSeconds/);
  });

  test('waitSeconds is a number of seconds, 0 or more', () => {
    assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 'orders', waitSeconds: '5' }),
      { name: 'TypeError', message: /`waitSeconds` must be a number of seconds, not string/ });
    for (const waitSeconds of [-1, Number.NaN, Infinity]) {
      assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 'orders', waitSeconds }),
        { name: 'RangeError', message: /`waitSeconds` must be a number of seconds, 0 or more/ });
    }
    new IdemKeysPersistenceLayer({ pool, scope: 'orders', waitSeconds: 2.5 });
  });

  test('leaseSeconds is a number of seconds, at least a millisecond', () => {
    for (const leaseSeconds of ['60', null, 60n]) {
      assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 'orders', leaseSeconds }),
        { name: 'TypeError', message: /`leaseSeconds` must be a number of seconds, not / });
    }
    for (const leaseSeconds of [0, -1, 0.0004, Number.NaN, Infinity]) {
      assert.throws(() => new IdemKeysPersistenceLayer({ pool, scope: 'orders', leaseSeconds }),
        { name: 'RangeError', message: /`leaseSeconds` must be a number of seconds, 0.001 or more/ });
    }
    new IdemKeysPersistenceLayer({ pool, scope: 'orders', leaseSeconds: 0.001 });
    new IdemKeysPersistenceLayer({ pool, scope: 'orders', leaseSeconds: 900 });
  });
});

describe('keys', () => {
  test('a Powertools key of up to 255 UTF-8 bytes is the idem_keys key as it is', () => {
    const key = `${'f'.repeat(230)}#${'A'.repeat(24)}`;
    assert.equal(storeKey(key), key);
    assert.equal(storeKey('€'.repeat(84) + '#ab'), '€'.repeat(84) + '#ab', '255 bytes');
    assert.match(storeKey('€'.repeat(84) + '#abc'), /^sha256:[0-9a-f]{64}$/, '256 bytes, 88 characters: as the Python store');
  });

  test('a longer one becomes sha256:<hex>, which no Powertools key (it has a #) can equal', () => {
    const long = `${'f'.repeat(300)}#${'A'.repeat(24)}`;
    assert.match(storeKey(long), /^sha256:[0-9a-f]{64}$/);
    assert.notEqual(storeKey(long), storeKey(`${long}x`));
    assert.equal(storeKey(long), storeKey(long));
  });

  test('a long key prefix works end to end under the mapped key', async () => {
    // The prefix is the function's name, which Powertools reads when the layer is made (makeIdempotent's
    // keyPrefix, which sets it too, exists only from some release after 2.14.0 on).
    const functionName = `service-${'x'.repeat(300)}`;
    const previous = process.env.AWS_LAMBDA_FUNCTION_NAME;
    process.env.AWS_LAMBDA_FUNCTION_NAME = functionName;
    let store;
    try {
      store = layer(pool, 'long-prefix');
    } finally {
      if (previous === undefined) delete process.env.AWS_LAMBDA_FUNCTION_NAME;
      else process.env.AWS_LAMBDA_FUNCTION_NAME = previous;
    }
    let runs = 0;
    const handler = makeIdempotent(async () => { runs += 1; return 'ok'; }, { persistenceStore: store });
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'ok');
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'ok');
    assert.equal(runs, 1);
    const row = await storedRow(pool, store.scope, powertoolsKey(functionName, { id: 1 }));
    assert.equal(row.outcome, 'replay');
  });

  test('the scope separates applications: the same key in two scopes is two records', async () => {
    let runs = 0;
    const work = async () => { runs += 1; return runs; };
    const config = new IdempotencyConfig({});
    const a = makeIdempotent(work, { persistenceStore: layer(pool, 'app-a'), config });
    const b = makeIdempotent(work, { persistenceStore: layer(pool, 'app-b'), config });
    assert.equal(await a({ id: 1 }, lambdaContext()), 1);
    assert.equal(await b({ id: 1 }, lambdaContext()), 2);
    assert.equal(await a({ id: 1 }, lambdaContext()), 1);
  });
});

describe('limits (README)', () => {
  const tooLarge = () => 'x'.repeat(1_100_000); // over idem_keys.max_response_bytes, 1 MB by default

  test('a result too large to store fails the update, and the key stays in progress', async () => {
    const store = layer(pool, 'too-large');
    const handler = makeIdempotent(async () => tooLarge(), { persistenceStore: store });
    await assert.rejects(handler({ id: 1 }, lambdaContext()), (error) => {
      assert.equal(error.name, 'IdempotencyPersistenceLayerError');
      assert.equal(error.cause.code, '54000');
      return true;
    });
    assert.equal((await storedRow(pool, store.scope, powertoolsKey('', { id: 1 }))).outcome, 'in_progress');
  });

  test('with Middy, the onError hook that follows releases it', async () => {
    const store = layer(pool, 'too-large-middy');
    let runs = 0;
    const handler = middy(async () => { runs += 1; return runs === 1 ? tooLarge() : 'small'; })
      .use(makeHandlerIdempotent({ persistenceStore: store }));
    await assert.rejects(handler({ id: 1 }, lambdaContext()), { name: 'IdempotencyPersistenceLayerError' });
    assert.equal(await handler({ id: 1 }, lambdaContext()), 'small');
  });

  test('a function that changes its payload cannot store its result under another key', async () => {
    const store = layer(pool, 'mutated');
    const handler = makeIdempotent(async (event) => { event.processed = true; return 'done'; }, { persistenceStore: store });
    await assert.rejects(handler({ id: 1 }, lambdaContext()), (error) => {
      assert.equal(error.name, 'IdempotencyPersistenceLayerError');
      assert.ok(error.cause instanceof IdempotencyClaimMissingError);
      return true;
    });
    assert.equal((await storedRow(pool, store.scope, powertoolsKey('', { id: 1, processed: true }))).outcome, null);
  });
});

test('the database has the edition test.sh named', async () => {
  const { rows: [row] } = await pool.query(`SELECT
      EXISTS (SELECT FROM pg_extension WHERE extname = 'idem_keys') AS extension,
      to_regprocedure('idem_keys_portable_version()') IS NOT NULL AS portable`);
  const expected = process.env.IDEM_EDITION;
  assert.ok(['extension', 'portable'].includes(expected), `IDEM_EDITION is ${expected}`);
  assert.deepEqual(row, { extension: expected === 'extension', portable: expected === 'portable' });
});
