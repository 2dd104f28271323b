// Compiled (not run) by packed.test.js: the types a CommonJS module gets (index.d.cts), both ways of requiring.
import express = require('express');
import pg = require('pg');
import idem = require('idem-keys-express');
import { idempotency, releaseOnError, TransactionEndedError } from 'idem-keys-express';

const pool = new pg.Pool();
const app = express();
app.use(idem.idempotency({ pool, scope: (req: express.Request) => req.get('X-Tenant'), lease: 120, wait: 0.5 }));
app.use(express.json());
app.post('/payments', (req, res) => {
  const recovered: boolean | undefined = req.idempotency?.recovered; // the global Express augmentation, once
  res.status(201).json({ recovered });
});
app.use(releaseOnError());

// One class, whichever way it was named.
const ended: TransactionEndedError = new idem.TransactionEndedError();
const code: 'IDEM_KEYS_TRANSACTION_ENDED' = ended.code;
void code;
const same: typeof idem.idempotency = idempotency;
void same;

// @ts-expect-error: lease is seconds, a number, no longer an interval's text
idempotency({ pool, scope: () => 't', lease: '2 min' });
// @ts-expect-error: limit is now maxBodyBytes
idempotency({ pool, scope: () => 't', limit: 1000 });
