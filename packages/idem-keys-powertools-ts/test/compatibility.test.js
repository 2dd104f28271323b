// The layer refuses a Powertools that would break its fencing. Each case runs planted-powertools.js in a
// process of its own, with a fault planted in the installed Powertools before the layer loads: a step that
// awaits before it calls its storage method, or a claim made from another async context. The constructor, or
// the first claim, must refuse with IdempotencyUnsupportedPowertoolsError naming the installed version and what
// the probe found, and never reach the database.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const script = fileURLToPath(new URL('./planted-powertools.js', import.meta.url));
// The Powertools this suite runs against (test.sh runs it against each release of the peer range).
const installed = JSON.parse(readFileSync(
  new URL('../node_modules/@aws-lambda-powertools/idempotency/package.json', import.meta.url), 'utf8')).version;

async function planted(fault) {
  const { stdout } = await promisify(execFile)(process.execPath, [script, fault], { timeout: 30_000 });
  return JSON.parse(stdout.trim().split('\n').at(-1));
}

function refusal(error, finding) {
  assert.equal(error.name, 'IdempotencyUnsupportedPowertoolsError');
  assert.ok(error.refusal, 'an instance of the exported IdempotencyUnsupportedPowertoolsError');
  assert.equal(error.powertoolsVersion, installed);
  assert.deepEqual(error.findings, [finding]);
  assert.ok(error.message.startsWith(
    `idem-keys-powertools refuses to run on @aws-lambda-powertools/idempotency ${installed}: ${finding}. `), error.message);
  assert.match(error.message, /a late write could carry another invocation's fencing token/);
  assert.match(error.message, /Use a release it is tested with \(\^2\.\d+\.\d+, every release up to 2\.\d+\.\d+\)/);
}

describe('the installed Powertools is checked before the layer runs', () => {
  test('as installed: the layer is made and its first claim reaches the database', async () => {
    const outcome = await planted('none');
    assert.equal(outcome.constructed, true);
    assert.equal(outcome.queries, 1);
    assert.equal(outcome.callError.name, 'IdempotencyPersistenceLayerError');
    assert.match(outcome.callError.cause.message, /has no database/);
  });

  for (const [fault, step, method] of [
    ['put-after-await', 'saveInProgress', '_putRecord'],
    ['update-after-await', 'saveSuccess', '_updateRecord'],
    ['delete-after-await', 'deleteRecord', '_deleteRecord'],
  ]) {
    test(`a ${step}() that awaits before it calls ${method}(): the constructor refuses`, async () => {
      const outcome = await planted(fault);
      assert.equal(outcome.constructed, false);
      refusal(outcome.constructorError, `${step}() did not call ${method}() before its first await`);
      assert.equal(outcome.queries, 0);
    });
  }

  test('a claim made from another async context than its call\'s: the first claim refuses', async () => {
    const outcome = await planted('put-in-another-context');
    assert.equal(outcome.constructed, true, 'the steps still call their storage methods at once');
    // Powertools wraps what the claim raised, and the function does not run.
    assert.equal(outcome.callError.name, 'IdempotencyPersistenceLayerError');
    assert.equal(outcome.callError.message, 'Failed to save in progress record to idempotency store');
    refusal(outcome.callError.cause,
      'the storage methods of a call did not all run in the async context its configure() ran in');
    assert.equal(outcome.result, undefined);
    assert.equal(outcome.queries, 0);
  });
});
