// What both consumers do with the package they loaded: one key through an Express app on the real database
// ($DATABASE_URL), the handler run once and its answer replayed.
'use strict';
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const http = require('node:http');
const express = require('express');
const pg = require('pg');

function post(port, key) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/', agent: false,
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key } }, (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end('{"amount": 1}');
  });
}

async function exercise({ idempotency, releaseOnError, parseKey }) {
  assert.equal(parseKey('"k"'), 'k');
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
  const scope = `packed-${randomUUID()}`;
  let runs = 0;
  const app = express();
  app.use(idempotency({ pool, scope: () => scope, lease: 30, retention: 600 }));
  app.use(express.json());
  app.post('/', (req, res) => {
    runs += 1;
    res.status(201).json({ runs, amount: req.body.amount, key: req.idempotency.key });
  });
  app.use(releaseOnError());
  const server = http.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const first = await post(server.address().port, 'k');
    assert.equal(first.status, 201, first.body);
    assert.deepEqual(JSON.parse(first.body), { runs: 1, amount: 1, key: 'k' });
    const again = await post(server.address().port, '"k"');
    assert.equal(again.headers['idempotent-replayed'], 'true');
    assert.equal(again.body, first.body);
    assert.equal(runs, 1);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await pool.end();
  }
}

module.exports = { exercise };
