// The request body: read whole for the fingerprint, then still there for express.json() and friends mounted
// after the middleware; a body some parser already read is an error, not an empty fingerprint.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import zlib from 'node:zlib';
import http from 'node:http';
import { idempotency, releaseOnError } from 'idem-keys-express';
import { isJsonBody, readBody, replayBody } from '../src/body.cjs';
import { EXPRESSES, listen, post, send } from './helpers.js';

// No database here: a pool that must not be reached.
const unreachable = { query: async () => { throw new Error('this test must not reach the database'); } };

for (const [name, express] of EXPRESSES) {
  describe(`${name}: the body after reading`, () => {
    const app = express();
    app.use(async (req, res, next) => {
      try {
        const body = await readBody(req, 1 << 20);
        req.rawLength = body.length;
        replayBody(req, body);
        next();
      } catch (err) {
        next(err);
      }
    });
    app.use(express.json(), express.text(), express.urlencoded({ extended: false }));
    app.use('/raw', express.raw({ type: 'application/octet-stream' }));
    app.post('/stream', (req, res) => { // a handler reading the stream itself
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => res.json({ raw: req.rawLength, text: Buffer.concat(chunks).toString() }));
    });
    app.post(/.*/, (req, res) => {
      res.json({ raw: req.rawLength, body: Buffer.isBuffer(req.body) ? req.body.toString('hex') : req.body ?? null });
    });
    const server = listen(app);
    after(async () => (await server).close());

    const parsed = async (reply) => {
      assert.equal(reply.status, 200, reply.raw.toString());
      return reply.json();
    };

    test('express.json() sees the JSON', async () => {
      const { port } = await server;
      assert.deepEqual(await parsed(await post(port, undefined, '{"a": [1, 2.50]}')), { raw: 16, body: { a: [1, 2.5] } });
    });

    test('an empty body with Content-Length: 0', async () => {
      const { port } = await server;
      assert.deepEqual(await parsed(await post(port, undefined, '')), { raw: 0, body: {} });
    });

    test('a chunked body', async () => {
      const { port } = await server;
      const reply = await new Promise((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent: false,
          headers: { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' } }, (res) => {
          let text = '';
          res.on('data', (c) => { text += c; });
          res.on('end', () => resolve(JSON.parse(text)));
        });
        req.on('error', reject);
        req.write('{"a"');
        setTimeout(() => req.end(': true}'), 30); // the body arrives after the middleware started reading
      });
      assert.deepEqual(reply, { raw: 11, body: { a: true } });
    });

    test('a gzip body is inflated by the parser, fingerprinted as sent', async () => {
      const { port } = await server;
      const gz = zlib.gzipSync('{"z": 1}');
      const reply = await post(port, undefined, gz, { headers: [['Content-Encoding', 'gzip']] });
      assert.deepEqual(await parsed(reply), { raw: gz.length, body: { z: 1 } });
    });

    test('text, urlencoded, raw bytes and the stream itself', async () => {
      const { port } = await server;
      assert.deepEqual(await parsed(await post(port, undefined, 'hi', { type: 'text/plain' })), { raw: 2, body: 'hi' });
      assert.deepEqual(await parsed(await post(port, undefined, 'a=1&b=2', { type: 'application/x-www-form-urlencoded' })),
        { raw: 7, body: { a: '1', b: '2' } });
      const bytes = Buffer.from([0, 255, 10, 13]);
      assert.deepEqual(await parsed(await post(port, undefined, bytes, { path: '/raw', type: 'application/octet-stream' })),
        { raw: 4, body: '00ff0a0d' });
      assert.deepEqual(await parsed(await post(port, undefined, 'as sent', { path: '/stream', type: 'text/x-mine' })),
        { raw: 7, text: 'as sent' });
    });

    test('a large body', async () => {
      const { port } = await server;
      const big = 'x'.repeat(300_000);
      const reply = await post(port, undefined, big, { path: '/stream', type: 'text/x-mine' });
      assert.deepEqual(await parsed(reply), { raw: big.length, text: big });
    });
  });

  describe(`${name}: the body must reach the middleware unread`, () => {
    test('a body parser mounted before it: a clear error, not a fingerprint of nothing', async () => {
      const app = express();
      app.use(express.json());
      app.use(idempotency({ pool: unreachable, scope: () => 't' }));
      app.post('/', (req, res) => res.json({ reached: true }));
      let seen;
      app.use((err, req, res, next) => {
        seen = err;
        res.status(500).json({ error: err.message });
      });
      const server = await listen(app);
      try {
        const reply = await post(server.port, 'k1', { a: 1 });
        assert.equal(reply.status, 500);
        assert.equal(seen.name, 'BodyConsumedError');
        assert.match(seen.message, /mount idempotency\(\) before express\.json\(\)/);
      } finally {
        await server.close();
      }
    });

    test('a body over maxBodyBytes: 413 body-too-large, the database untouched', async () => {
      const app = express();
      app.use(idempotency({ pool: unreachable, scope: () => 't', maxBodyBytes: 1000 }));
      app.post('/', (req, res) => res.json({ reached: true }));
      app.use(releaseOnError());
      const server = await listen(app);
      try {
        const reply = await post(server.port, 'k1', 'x'.repeat(5000), { type: 'text/plain' });
        assert.equal(reply.status, 413);
        assert.equal(reply.headers['content-type'], 'application/problem+json');
        assert.equal(reply.json().code, 'body-too-large');
        const chunked = await new Promise((resolve, reject) => { // no Content-Length: found out while reading
          const req = http.request({ host: '127.0.0.1', port: server.port, method: 'POST', path: '/', agent: false,
            headers: { 'Content-Type': 'text/plain', 'Idempotency-Key': 'k2', 'Transfer-Encoding': 'chunked' } },
          (res) => {
            res.resume();
            resolve(res.statusCode);
          });
          req.on('error', reject);
          for (let i = 0; i < 5; i += 1) req.write('y'.repeat(500));
          req.end();
        });
        assert.equal(chunked, 413);
        const fits = await send(server.port, { method: 'GET', path: '/' }); // the server is still fine
        assert.equal(fits.status, 404);
      } finally {
        await server.close();
      }
    });
  });
}

test('which bodies count as JSON', () => {
  const req = (type, encoding) => ({ headers: { 'content-type': type, 'content-encoding': encoding } });
  const json = Buffer.from('{"a": 1}');
  assert.equal(isJsonBody(req('application/json'), json), true);
  assert.equal(isJsonBody(req('Application/JSON; charset=utf-8'), json), true);
  assert.equal(isJsonBody(req('application/merge-patch+json'), json), true);
  assert.equal(isJsonBody(req('application/problem+json'), json), true);
  assert.equal(isJsonBody(req('text/json'), json), false);
  assert.equal(isJsonBody(req('application/jsonx'), json), false);
  assert.equal(isJsonBody(req(undefined), json), false);
  assert.equal(isJsonBody(req('application/json', 'gzip'), json), false, 'compressed: by its bytes');
  assert.equal(isJsonBody(req('application/json'), Buffer.from([0x7b, 0xff, 0x7d])), false, 'not UTF-8');
  assert.equal(isJsonBody(req('application/json'), Buffer.alloc(0)), false, 'empty: by its bytes, no failing round trip');
  assert.equal(isJsonBody(req('application/json'), Buffer.from('{"a": "\0"}')), false, 'a NUL byte: by its bytes');
});
