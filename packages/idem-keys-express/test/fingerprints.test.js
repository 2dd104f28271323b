// The fingerprint vectors of contract/fingerprints.json through the middleware's claim path, against a real
// idem_keys ($DATABASE_URL): two requests under one key and one scope; the same request replays the first answer,
// another is 422 key-reused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import express from 'express';
import { idempotency, releaseOnError } from 'idem-keys-express';
import { contract } from './contract.js';
import { databasePool, fresh, listen, memoryLogger, send } from './helpers.js';

const { vectors } = contract('fingerprints');
const { body: KEY_REUSED } = contract('problems').problems.find((p) => p.code === 'key-reused');
const pool = databasePool();
let server;
let runs = 0;

before(async () => {
  const app = express();
  const methods = [...new Set(vectors.flatMap((v) => [v.first.method, v.second.method]))];
  app.use(idempotency({ pool, scope: (req) => req.get('X-Tenant'), methods, logger: memoryLogger() }));
  app.use((req, res) => { // no body parser: the body is the fingerprint's alone, compressed or not
    runs += 1;
    res.status(201).json({ run: runs });
  });
  app.use(releaseOnError());
  server = await listen(app);
});
after(async () => {
  await server.close();
  await pool.end();
});

function sendAs(tenant, { method, target, content_type: type, content_encoding: encoding, body }) {
  const headers = [['X-Tenant', tenant], ['Idempotency-Key', 'k']];
  if (type !== undefined) headers.push(['Content-Type', type]);
  if (encoding !== undefined) headers.push(['Content-Encoding', encoding]);
  return send(server.port, { method, path: target, headers, body: Buffer.from(body, 'utf8') });
}

for (const vector of vectors) {
  test(vector.name, async () => {
    const tenant = fresh('fp');
    const first = await sendAs(tenant, vector.first);
    assert.equal(first.status, 201, first.raw.toString());
    const second = await sendAs(tenant, vector.second);
    if (vector.same) {
      assert.equal(second.status, 201, second.raw.toString());
      assert.equal(second.headers['idempotent-replayed'], 'true', 'the first answer, replayed');
      assert.deepEqual(second.raw, first.raw);
    } else {
      assert.equal(second.status, 422, second.raw.toString());
      assert.equal(second.raw.toString(), KEY_REUSED);
    }
  });
}
