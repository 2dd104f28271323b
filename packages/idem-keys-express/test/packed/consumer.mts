// Compiled (not run) by packed.test.js: the types an ES module gets (index.d.ts) accept the README's usage and
// refuse mistakes.
import express from 'express';
import pg from 'pg';
import { idempotency, releaseOnError, parseKey, DEFAULT_STORED_HEADERS, TransactionEndedError } from 'idem-keys-express';
import type { IdempotencyAttempt, IdempotencyOptions, Seconds } from 'idem-keys-express';

const pool = new pg.Pool();
const app = express();
const lease: Seconds = 30;
app.use(idempotency({
  pool,
  scope: (req: express.Request) => req.get('X-Tenant'),
  lease,
  wait: 2,
  retention: null,
  methods: ['POST'],
  required: true,
  retryableStatuses: [429, 503],
  storedHeaders: [...DEFAULT_STORED_HEADERS, 'X-Charge-Id'],
  outcomeHeader: 'Idempotency-Outcome',
  logger: console,
  maxBodyBytes: 1 << 20,
}));
app.use(express.json());
app.post('/payments', (req, res) => {
  const attempt: IdempotencyAttempt | undefined = req.idempotency;
  if (attempt?.recovered) attempt.leaveUnsettled();
  const token: string | undefined = attempt?.token;
  res.status(201).json({ key: attempt?.key, token });
});
app.use(releaseOnError());

const key: string | null = parseKey('"k"');
void key;

// @ts-expect-error: scope is required
idempotency({ pool });
// @ts-expect-error: lease is seconds, a number, no longer an interval's text
idempotency({ pool, scope: () => 't', lease: '30s' });
// @ts-expect-error: limit is now maxBodyBytes
idempotency({ pool, scope: () => 't', limit: 1000 });

// Transactional mode: a pg.Pool (connect()), everywhere, per request, or from a setting.
app.use(idempotency({ pool, scope: () => 't', transactional: true }));
app.post('/tx', idempotency({ pool, scope: () => 't', transactional: (req: express.Request) => req.path === '/tx' }),
  async (req, res) => {
    const client = req.idempotency?.client;
    const { rows } = client ? await client.query('INSERT INTO t VALUES ($1) RETURNING id', [1]) : { rows: [] };
    const full = client as pg.PoolClient | undefined; // the whole of pg's client API
    await full?.query('SAVEPOINT s');
    res.status(201).json({ id: rows[0]?.id });
    // After the answer the client refuses: its query() rejects with TransactionEndedError.
    await client?.query('SELECT 1').catch((err: unknown) => {
      if (err instanceof TransactionEndedError) {
        const code: 'IDEM_KEYS_TRANSACTION_ENDED' = err.code;
        void code;
      }
    });
  });
const fromSetting: IdempotencyOptions = { pool, scope: () => 't', transactional: process.env.IDEM_TX === '1' };
idempotency(fromSetting);
const queryOnly = { query: pool.query.bind(pool) } as { query(text: string): Promise<{ rows: any[] }> };
idempotency({ pool: queryOnly, scope: () => 't' });
idempotency({ pool: queryOnly, scope: () => 't', transactional: false });
// @ts-expect-error: transactional mode needs a pool with connect()
idempotency({ pool: queryOnly, scope: () => 't', transactional: true });
// @ts-expect-error: transactional is a boolean or a function of the request
idempotency({ pool, scope: () => 't', transactional: 'yes' });
