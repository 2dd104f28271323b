// Compiled (not run) by `npm test`: index.d.ts must accept the README's usage and refuse mistakes.
import express from 'express';
import pg from 'pg';
import { idempotency, releaseOnError, parseKey, DEFAULT_STORED_HEADERS } from 'idem-keys-express';

const pool = new pg.Pool();
const app = express();
app.use(idempotency({
  pool,
  scope: (req: express.Request) => req.get('X-Tenant'),
  lease: '30s',
  wait: 2000,
  retention: null,
  methods: ['POST'],
  required: true,
  retryableStatuses: [429, 503],
  storedHeaders: [...DEFAULT_STORED_HEADERS, 'X-Charge-Id'],
  outcomeHeader: 'Idempotency-Outcome',
  logger: console,
  limit: 1 << 20,
}));
app.use(express.json());
app.post('/payments', (req, res) => {
  const attempt = req.idempotency;
  if (attempt?.recovered) attempt.leaveUnsettled();
  const token: string | undefined = attempt?.token;
  res.status(201).json({ key: attempt?.key, token });
});
app.use(releaseOnError());

const key: string | null = parseKey('"k"');
void key;

// @ts-expect-error: scope is required
idempotency({ pool });
// @ts-expect-error: lease is milliseconds or an interval's text
idempotency({ pool, scope: () => 't', lease: true });
