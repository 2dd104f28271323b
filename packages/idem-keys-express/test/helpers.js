// Test plumbing: an Express app on a kernel-chosen loopback port, a raw HTTP client (so a header may repeat),
// and the database from $DATABASE_URL.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import express5 from 'express';
import express4 from 'express4';

// Both majors: every app-level test runs on each.
export const EXPRESSES = [['express 5', express5], ['express 4', express4]];

export function databasePool() {
  if (!process.env.DATABASE_URL) {
    throw new Error('DATABASE_URL must name a database where idem_keys is installed (see test.sh)');
  }
  return new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
}

export const fresh = (prefix) => `${prefix}-${randomUUID().slice(0, 12)}`;

export async function listen(app) {
  const server = http.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) };
}

// One request. headers: [[name, value], ...], a name may repeat. Resolves { status, statusMessage, headers, raw,
// json() }.
export function send(port, { method = 'POST', path = '/', headers = [], body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false });
    const grouped = new Map();
    for (const [name, value] of headers) grouped.set(name, [...(grouped.get(name) || []), value]);
    for (const [name, values] of grouped) req.setHeader(name, values.length === 1 ? values[0] : values);
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('end', () => {
        const raw = Buffer.concat(chunks);
        resolve({ status: res.statusCode, statusMessage: res.statusMessage, headers: res.headers, raw,
          json: () => JSON.parse(raw) });
      });
    });
    req.end(body);
  });
}

export function post(port, key, body, { path = '/', type = 'application/json', headers = [] } = {}) {
  const all = [['Content-Type', type], ...headers];
  if (key !== undefined) all.push(['Idempotency-Key', key]);
  const raw = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body ?? {});
  return send(port, { method: 'POST', path, headers: all, body: raw });
}

// A promise with its resolve on the side: a handler waits on it where a test wants to hold it.
export function gate() {
  let open;
  const promise = new Promise((resolve) => { open = resolve; });
  return { promise, open };
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The outcome idem_lookup sees for a key, or null.
export async function lookup(pool, scope, key) {
  const { rows } = await pool.query('SELECT (idem_lookup($1, $2)).outcome', [scope, key]);
  return rows[0].outcome;
}

// Collects what the middleware logs, instead of console.
export function memoryLogger() {
  const lines = [];
  return { lines, warn: (msg) => lines.push(['warn', msg]), error: (msg) => lines.push(['error', msg]) };
}
