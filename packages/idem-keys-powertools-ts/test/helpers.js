// Test plumbing: the database from $DATABASE_URL, fresh scopes, fake Lambda contexts, gates, and the stored
// row of a key as idem_lookup shows it.
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdemKeysPersistenceLayer, storeKey } from '../index.js';

export function databasePool() {
  if (!process.env.DATABASE_URL) {
    throw new Error('DATABASE_URL must name a database where idem_keys is installed (see test.sh)');
  }
  return new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
}

// Every test has its own scope, so that tests never see each other's keys, nor a previous run's.
export const fresh = (prefix) => `${prefix}-${randomUUID().slice(0, 12)}`;

export const layer = (pool, prefix, options = {}) => new IdemKeysPersistenceLayer({ pool, scope: fresh(prefix), ...options });

// What makeIdempotent recognises as a Lambda context: an object with getRemainingTimeInMillis().
export const lambdaContext = (remainingMs = 60_000, extra = {}) => ({
  functionName: 'orders',
  awsRequestId: randomUUID(),
  getRemainingTimeInMillis: () => remainingMs,
  ...extra,
});

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A promise to await and the function that resolves it.
export function gate() {
  let open;
  const opened = new Promise((resolve) => { open = resolve; });
  return { opened, open };
}

// A pool that counts the statements sent through it.
export function countingPool(pool) {
  const counted = { queries: 0, query: (...args) => { counted.queries += 1; return pool.query(...args); } };
  return counted;
}

// Powertools' idempotency key of a payload with the default md5 hash: prefix#base64(md5(JSON of the payload,
// keys sorted)). The payloads given here have their keys in order already.
export const powertoolsKey = (prefix, payload) =>
  `${prefix}#${createHash('md5').update(JSON.stringify(payload)).digest('base64')}`;

export async function storedRow(pool, scope, idempotencyKey) {
  const { rows: [row] } = await pool.query(
    `SELECT (r).outcome, (r).status_code, (r).response, (r).response_bytes, (r).headers, (r).attempt, (r).retry_after
       FROM (SELECT idem_lookup($1::text, $2::text) AS r) s`,
    [scope, storeKey(idempotencyKey)],
  );
  return row;
}

export const named = (name) => (error) => {
  if (error?.name !== name) throw error;
  return true;
};
