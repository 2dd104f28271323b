// The middleware's own answers: application/problem+json with the fields in one order in every language.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PROBLEMS, problem } from '../src/problems.js';

const EXPECTED = {
  'key-missing': [400, 'Bad Request'],
  'key-malformed': [400, 'Bad Request'],
  'body-too-large': [413, 'Content Too Large'],
  'request-in-progress': [409, 'Conflict'],
  'lease-lost': [409, 'Conflict'],
  'key-reused': [422, 'Unprocessable Content'],
  'scope-missing': [500, 'Internal Server Error'],
  'store-failed': [500, 'Internal Server Error'],
  'store-unavailable': [503, 'Service Unavailable'],
  'commit-failed': [503, 'Service Unavailable'],
  'commit-unknown': [503, 'Service Unavailable'],
};

test('every problem: status, RFC 9110 title, field order', () => {
  assert.deepEqual(Object.keys(PROBLEMS).sort(), Object.keys(EXPECTED).sort());
  for (const [code, [status, title]] of Object.entries(EXPECTED)) {
    const made = problem(code);
    assert.equal(made.status, status, code);
    const body = JSON.parse(made.body);
    assert.deepEqual(Object.keys(body), ['type', 'title', 'status', 'detail', 'code'], code);
    assert.deepEqual({ ...body, detail: undefined }, { type: 'about:blank', title, status, detail: undefined, code });
    assert.ok(body.detail.length > 10, `${code}: a detail in words`);
  }
});

test('the bytes are compact JSON', () => {
  assert.equal(problem('key-reused').body.toString(), '{"type":"about:blank","title":"Unprocessable Content",'
    + '"status":422,"detail":"this Idempotency-Key was used with another request","code":"key-reused"}');
});

test('commit-failed: the bytes every middleware sends', () => {
  assert.equal(problem('commit-failed').body.toString(), '{"type":"about:blank","title":"Service Unavailable",'
    + '"status":503,"detail":"the request\'s changes could not be committed: nothing was done, retry with the same '
    + 'Idempotency-Key","code":"commit-failed"}');
});

test('commit-unknown: the bytes every middleware sends', () => {
  assert.equal(problem('commit-unknown').body.toString(), '{"type":"about:blank","title":"Service Unavailable",'
    + '"status":503,"detail":"the request\'s changes may or may not have been committed: retry with the same '
    + 'Idempotency-Key to learn which","code":"commit-unknown"}');
});
