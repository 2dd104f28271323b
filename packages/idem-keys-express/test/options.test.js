// idempotency()'s options: required ones, defaults, and mistakes refused when the middleware is made.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { idempotency } from '../index.js';
import { resolveOptions } from '../src/options.js';

const pool = { query: async () => ({ rows: [] }) };
const scope = () => 'tenant';

test('pool and scope are required', () => {
  assert.throws(() => idempotency(), TypeError);
  assert.throws(() => idempotency({ pool }), { name: 'TypeError', message: /scope is required/ });
  assert.throws(() => idempotency({ scope }), { name: 'TypeError', message: /pool is required/ });
  assert.throws(() => idempotency({ pool, scope: 'tenant' }), { name: 'TypeError', message: /scope/ });
  assert.equal(typeof idempotency({ pool, scope }), 'function');
});

test('defaults', () => {
  const c = resolveOptions({ pool, scope });
  assert.equal(c.lease, null);
  assert.equal(c.wait, null);
  assert.equal(c.retention, null);
  assert.deepEqual([...c.methods], ['POST', 'PATCH']);
  assert.equal(c.required, true);
  assert.deepEqual([...c.retryableStatuses], [429, 503]);
  assert.deepEqual([...c.storedHeaders],
    ['content-type', 'content-language', 'content-location', 'location', 'etag', 'link']);
  assert.equal(c.outcomeHeader, null);
  assert.equal(c.logger, console);
});

test('durations: milliseconds or PostgreSQL intervals', () => {
  const c = resolveOptions({ pool, scope, lease: 30_000, wait: '2 seconds', retention: '7d' });
  assert.deepEqual([c.lease, c.wait, c.retention], ['30000 milliseconds', '2 seconds', '7d']);
  assert.equal(resolveOptions({ pool, scope, wait: 0 }).wait, '0 milliseconds');
  assert.throws(() => resolveOptions({ pool, scope, lease: 0 }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, wait: -1 }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, lease: NaN }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, retention: '' }), TypeError);
});

test('mistakes are refused', () => {
  assert.throws(() => resolveOptions({ pool, scope, retryable: [500] }), { message: /unknown option "retryable"/ });
  assert.throws(() => resolveOptions({ pool, scope, methods: 'POST' }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, retryableStatuses: ['503'] }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, required: 'yes' }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, logger: {} }), TypeError);
  assert.throws(() => resolveOptions({ pool, scope, limit: -1 }), TypeError);
  assert.deepEqual([...resolveOptions({ pool, scope, methods: ['put', 'POST'] }).methods], ['PUT', 'POST']);
});

test('transactional: true, false or a function, and a pool with connect()', () => {
  const connectable = { ...pool, connect: async () => ({}) };
  assert.equal(resolveOptions({ pool, scope }).transactional({}), false, 'off by default');
  assert.equal(resolveOptions({ pool, scope, transactional: false }).transactional({}), false);
  assert.equal(resolveOptions({ pool: connectable, scope, transactional: true }).transactional({}), true);
  const pick = (req) => req.path === '/tx';
  assert.equal(resolveOptions({ pool: connectable, scope, transactional: pick }).transactional, pick);
  assert.throws(() => resolveOptions({ pool, scope, transactional: true }),
    { name: 'TypeError', message: /transactional needs a pool with connect\(\)/ });
  assert.throws(() => resolveOptions({ pool, scope, transactional: pick }), { message: /connect\(\)/ });
  for (const bad of ['yes', 1, null, {}]) {
    assert.throws(() => resolveOptions({ pool: connectable, scope, transactional: bad }),
      { name: 'TypeError', message: /transactional must be true, false or a function/ }, String(bad));
  }
});
