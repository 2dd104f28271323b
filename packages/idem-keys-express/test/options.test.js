// idempotency()'s options: the shared vocabulary, required ones, defaults, and every mistake refused when the
// middleware is made.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { idempotency } from 'idem-keys-express';
import { OPTION_NAMES, resolveOptions } from '../src/options.cjs';

const pool = { query: async () => ({ rows: [] }) };
const scope = () => 'tenant';

// The option vocabulary every idem_keys middleware shares (docs/integrations.md, "Options"), in snake case; each
// package names them in its language's case. pool is the package's own (the database, as each language has it).
const VOCABULARY = ['scope', 'lease', 'wait', 'retention', 'methods', 'required', 'retryable_statuses',
  'stored_headers', 'outcome_header', 'max_body_bytes', 'transactional', 'logger'];
const camelCase = (name) => name.replace(/_([a-z])/g, (_, letter) => letter.toUpperCase());

test('the option names are the shared vocabulary, in JavaScript\'s case, and pool', () => {
  assert.deepEqual([...OPTION_NAMES].sort(), ['pool', ...VOCABULARY.map(camelCase)].sort());
});

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
  assert.equal(c.maxBodyBytes, 1024 * 1024);
  assert.equal(c.transactional({}), false);
});

test('durations are seconds: numbers, fractions too', () => {
  const c = resolveOptions({ pool, scope, lease: 30, wait: 0.5, retention: 7 * 86400 });
  assert.deepEqual([c.lease, c.wait, c.retention], [30, 0.5, 604800]);
  assert.equal(resolveOptions({ pool, scope, wait: 0 }).wait, 0, 'no wait at all');
  assert.equal(resolveOptions({ pool, scope, lease: null }).lease, null, 'null: the server\'s setting');
});

test('a duration as text is refused, naming the option and seconds', () => {
  for (const name of ['lease', 'wait', 'retention']) {
    for (const text of ['30s', '5 min', '30']) {
      assert.throws(() => idempotency({ pool, scope, [name]: text }),
        { name: 'TypeError', message: new RegExp(`^idempotency\\(\\): ${name} is in seconds, a number`) }, `${name}: ${text}`);
    }
  }
});

test('a duration out of range, or not a number, is refused', () => {
  const refused = [['lease', 0], ['lease', -1], ['retention', 0], ['wait', -0.5], ['lease', NaN], ['wait', Infinity],
    ['retention', 30n], ['lease', true], ['wait', {}]];
  for (const [name, value] of refused) {
    assert.throws(() => idempotency({ pool, scope, [name]: value }),
      { name: 'TypeError', message: new RegExp(`${name} must be a number of seconds`) }, `${name}: ${String(value)}`);
  }
});

test('maxBodyBytes: bytes, or Infinity; the old name limit is refused with the new one', () => {
  assert.equal(resolveOptions({ pool, scope, maxBodyBytes: 0 }).maxBodyBytes, 0);
  assert.equal(resolveOptions({ pool, scope, maxBodyBytes: Infinity }).maxBodyBytes, Infinity);
  for (const bad of [-1, 1.5, '1mb', null]) {
    assert.throws(() => idempotency({ pool, scope, maxBodyBytes: bad }),
      { name: 'TypeError', message: /maxBodyBytes must be a number of bytes/ }, String(bad));
  }
  assert.throws(() => idempotency({ pool, scope, limit: 1000 }),
    { name: 'TypeError', message: 'idempotency(): the option limit is now called maxBodyBytes' });
});

test('other mistakes are refused', () => {
  assert.throws(() => idempotency({ pool, scope, retryable: [500] }), { message: /unknown option "retryable"/ });
  assert.throws(() => idempotency({ pool, scope, methods: 'POST' }), { message: /methods must be an array/ });
  assert.throws(() => idempotency({ pool, scope, methods: [''] }), { message: /methods must be an array/ });
  assert.throws(() => idempotency({ pool, scope, retryableStatuses: ['503'] }), { message: /retryableStatuses/ });
  assert.throws(() => idempotency({ pool, scope, retryableStatuses: [99] }), { message: /retryableStatuses/ });
  assert.throws(() => idempotency({ pool, scope, storedHeaders: 'Location' }), { message: /storedHeaders must be/ });
  assert.throws(() => idempotency({ pool, scope, required: 'yes' }), { message: /required must be true or false/ });
  assert.throws(() => idempotency({ pool, scope, outcomeHeader: '' }), { message: /outcomeHeader must be a header/ });
  assert.throws(() => idempotency({ pool, scope, logger: {} }), { message: /logger must have warn\(\) and error\(\)/ });
  assert.throws(() => idempotency(null), { message: /options must be an object/ });
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
