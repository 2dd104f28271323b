// The Idempotency-Key parser (docs/integrations.md, "The key") against every case of contract/keys.json.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseKey } from 'idem-keys-express';
import { requestKey } from '../src/key.cjs';
import { contract } from './contract.js';

const { cases } = contract('keys');

test('every case of contract/keys.json', () => {
  assert.ok(cases.length > 0);
  for (const { name, value, key } of cases) assert.equal(parseKey(value), key, name);
});

test('a request has exactly one Idempotency-Key field', () => {
  const req = (...raw) => ({ rawHeaders: raw });
  assert.deepEqual(requestKey(req('Host', 'x')), { missing: true });
  assert.deepEqual(requestKey(req('idempotency-KEY', '  "k1"\t')), { key: 'k1' }, 'any case, whitespace trimmed');
  assert.deepEqual(requestKey(req('Idempotency-Key', 'a', 'Idempotency-Key', 'a')), { malformed: true }, 'twice');
  assert.deepEqual(requestKey(req('Idempotency-Key', '')), { malformed: true }, 'present but empty');
});
