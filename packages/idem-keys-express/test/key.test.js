// The Idempotency-Key parser (docs/integrations.md, "The key"), table-driven.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseKey } from '../index.js';
import { requestKey } from '../src/key.js';

const VALID = [
  ['8e03978e-40d5-43e8', '8e03978e-40d5-43e8', 'a bare key'],
  ['"8e03978e-40d5-43e8"', '8e03978e-40d5-43e8', 'the same key quoted'],
  ['!#$%&\'()*+,-./:;<=>?@[]^_`{|}~', '!#$%&\'()*+,-./:;<=>?@[]^_`{|}~', 'every bare punctuation but " and \\'],
  ['"two words"', 'two words', 'a space inside quotes'],
  ['"say \\"hi\\" \\\\ bye"', 'say "hi" \\ bye', 'the two escapes'],
  ['k'.repeat(255), 'k'.repeat(255), '255 characters bare'],
  [`"${'k'.repeat(255)}"`, 'k'.repeat(255), '255 characters quoted'],
  [`"${'\\\\'.repeat(255)}"`, '\\'.repeat(255), '255 escaped backslashes: counted after unquoting'],
  ['x', 'x', 'one character'],
];

const MALFORMED = [
  ['', 'empty'],
  ['""', 'empty between quotes'],
  ['"unclosed', 'an unclosed quote'],
  ['"ab"c', 'characters after the closing quote'],
  ['"abc";p=1', 'a Structured Field parameter'],
  ['"a\\qb"', 'another escape'],
  ['"ends with \\"', 'an escape eating the closing quote'],
  ['two words', 'a space in a bare key'],
  ['ab"c', 'a quote in a bare key'],
  ['back\\slash', 'a backslash in a bare key'],
  ['caf\u00e9', 'non-ASCII bare'],
  ['"caf\u00e9"', 'non-ASCII quoted'],
  ['tab\there', 'a control character'],
  ['"tab\there"', 'a control character quoted'],
  ['k'.repeat(256), '256 characters bare'],
  [`"${'k'.repeat(256)}"`, '256 characters quoted'],
];

test('valid keys, bare and quoted', () => {
  for (const [value, key, why] of VALID) assert.equal(parseKey(value), key, why);
});

test('malformed keys', () => {
  for (const [value, why] of MALFORMED) assert.equal(parseKey(value), null, why);
});

test('a request has exactly one Idempotency-Key field', () => {
  const req = (...raw) => ({ rawHeaders: raw });
  assert.deepEqual(requestKey(req('Host', 'x')), { missing: true });
  assert.deepEqual(requestKey(req('idempotency-KEY', '  "k1"\t')), { key: 'k1' }, 'any case, whitespace trimmed');
  assert.deepEqual(requestKey(req('Idempotency-Key', 'a', 'Idempotency-Key', 'a')), { malformed: true }, 'twice');
  assert.deepEqual(requestKey(req('Idempotency-Key', '')), { malformed: true }, 'present but empty');
});
