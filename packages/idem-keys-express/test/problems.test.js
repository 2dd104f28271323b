// The middleware's own answers against contract/problems.json: the package's table holds every problem of the
// contract, and each is answered through the middleware with exactly its status, Content-Type, Retry-After and
// bytes. The database is a stand-in here (each answer needs a claim, a finish or a COMMIT to go a certain way);
// the tests against a real idem_keys check the same answers where a real database can make them.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, test } from 'node:test';
import { idempotency, releaseOnError } from 'idem-keys-express';
import { PROBLEMS, problem } from '../src/problems.cjs';
import { contract } from './contract.js';
import { EXPRESSES, listen, memoryLogger, post } from './helpers.js';

const { content_type: CONTENT_TYPE, problems: PROBLEM_LIST } = contract('problems');
const LEASE_RETRY_AFTER = 7; // the claim's own Retry-After, as the stand-in database answers it

// A stand-in for the pool: the claim answers claimRow (or fails with it), idem_finish and COMMIT fail with the
// error given, if any.
function standIn({ claimRow = { outcome: 'claimed', token: '1' }, finishError, commitError } = {}) {
  const query = async (text) => {
    if (text.includes('idem_claim')) {
      if (claimRow instanceof Error) throw claimRow;
      return { rows: [claimRow] };
    }
    if (text.includes('idem_finish')) {
      if (finishError) throw finishError;
      return { rows: [{}] };
    }
    if (text.includes('idem_release')) return { rows: [{ released: true }] };
    if (text === 'COMMIT' && commitError) throw commitError;
    if (['BEGIN', 'COMMIT', 'ROLLBACK'].includes(text)) return { command: text, rows: [] };
    throw new Error(`the stand-in does not know ${text}`);
  };
  return { query, connect: async () => ({ query, release() {} }) };
}

const serverError = (code) => Object.assign(new Error(`server says ${code}`), { severity: 'ERROR', code });

// How each problem comes about: the options of the middleware and the request sent.
const CAUSES = {
  'key-missing': { key: undefined },
  'key-malformed': { key: 'two words' },
  'body-too-large': { options: { maxBodyBytes: 10 }, body: 'x'.repeat(100) },
  'request-in-progress': { pool: standIn({ claimRow: { outcome: 'in_progress', retry_after: LEASE_RETRY_AFTER } }) },
  'lease-lost': { pool: standIn({ finishError: serverError('55000') }) },
  'key-reused': { pool: standIn({ claimRow: { outcome: 'mismatch' } }) },
  'scope-missing': { options: { scope: () => undefined } },
  'store-failed': { pool: standIn({ finishError: serverError('54000') }) },
  'store-unavailable': { pool: standIn({ claimRow: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) }) },
  'commit-failed': { pool: standIn({ commitError: serverError('23505') }), options: { transactional: true } },
  'commit-unknown': { pool: standIn({ commitError: new Error('Connection terminated unexpectedly') }),
    options: { transactional: true } },
};

// The Retry-After a problem of the contract carries: none, its seconds, or the claim's own.
const expectedRetryAfter = ({ retry_after: value }) => (value === null ? undefined
  : String(value === 'lease' ? LEASE_RETRY_AFTER : value));

function assertContract(reply, expected) {
  assert.equal(reply.status, expected.status, `${expected.code}: ${reply.raw}`);
  assert.equal(reply.headers['content-type'], CONTENT_TYPE, expected.code);
  assert.equal(reply.headers['retry-after'], expectedRetryAfter(expected), `${expected.code}: Retry-After`);
  assert.equal(reply.raw.toString(), expected.body, expected.code);
}

test('the table holds every problem of the contract, and no other', () => {
  assert.deepEqual(Object.keys(PROBLEMS).sort(), PROBLEM_LIST.map((p) => p.code).sort());
  for (const expected of PROBLEM_LIST) {
    const made = problem(expected.code, LEASE_RETRY_AFTER);
    const headers = Object.fromEntries(made.headers.map(([name, value]) => [name.toLowerCase(), value]));
    assertContract({ status: made.status, headers, raw: made.body }, expected);
  }
});

test('the claim\'s Retry-After is at least 1 second', () => {
  const retryAfter = (seconds) => problem('request-in-progress', seconds).headers[0];
  assert.deepEqual(retryAfter(0), ['Retry-After', '1']);
  assert.deepEqual(retryAfter(null), ['Retry-After', '1']);
  assert.deepEqual(retryAfter(30), ['Retry-After', '30']);
});

for (const [name, express] of EXPRESSES) {
  describe(`${name}: every problem the middleware answers over HTTP`, () => {
    for (const expected of PROBLEM_LIST.filter((p) => CAUSES[p.code])) {
      test(expected.code, async () => {
        const cause = CAUSES[expected.code];
        const app = express();
        app.set('env', 'test');
        app.use(idempotency({ pool: cause.pool ?? standIn(), scope: () => 'tenant', logger: memoryLogger(),
          ...cause.options }));
        app.post('/', (req, res) => res.status(201).json({ ok: true }));
        app.use(releaseOnError());
        const server = await listen(app);
        try {
          const key = 'key' in cause ? cause.key : 'k';
          assertContract(await post(server.port, key, cause.body ?? '{}'), expected);
        } finally {
          await server.close();
        }
      });
    }
  });
}

// A body that cannot be read: Node's server destroys the connection with the stream, so the answer is checked on
// a request of the middleware's own making, whose connection stays.
describe('body-unreadable: a body whose stream fails, or ends before its end', () => {
  const expected = PROBLEM_LIST.find((p) => p.code === 'body-unreadable');

  function request(socket = { destroyed: false, readable: true }) {
    const req = new PassThrough();
    Object.assign(req, { method: 'POST', url: '/', originalUrl: '/', socket,
      headers: { 'content-type': 'text/plain' }, rawHeaders: ['Idempotency-Key', 'k'] });
    return req;
  }
  function response() {
    const headers = {};
    let ended;
    const done = new Promise((resolve) => { ended = resolve; });
    return {
      done,
      statusCode: 200,
      setHeader(name, value) { headers[name.toLowerCase()] = value; },
      end(body) { ended({ status: this.statusCode, headers, raw: Buffer.from(body) }); },
    };
  }
  const middleware = () => idempotency({ pool: standIn({ claimRow: new Error('must not be claimed') }),
    scope: () => 'tenant', logger: memoryLogger() });

  for (const [how, fail] of [['the stream fails', (req) => req.destroy(new Error('boom'))],
    ['the client aborts', (req) => req.destroy()]]) {
    test(`${how}: 400 body-unreadable, nothing claimed`, async () => {
      const req = request();
      const res = response();
      let nexted = false;
      middleware()(req, res, () => { nexted = true; });
      req.write('part of a body');
      setImmediate(() => fail(req));
      assertContract(await res.done, expected);
      assert.equal(nexted, false, 'the handler does not run');
    });
  }

  test('a client that is gone gets nothing', async () => {
    const logger = memoryLogger();
    const req = request({ destroyed: true, readable: false });
    let answered = false;
    idempotency({ pool: standIn(), scope: () => 'tenant', logger })(req,
      { setHeader() {}, end() { answered = true; } }, () => assert.fail('the handler must not run'));
    setImmediate(() => req.destroy());
    for (let i = 0; i < 50 && !logger.lines.length; i += 1) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.match(logger.lines[0][1], /could not be read/);
    assert.equal(answered, false);
  });
});
