// idem-keys-express: Idempotency-Key middleware for Express 4 and 5 on PostgreSQL's idem_keys. The one
// implementation, CommonJS so that require() loads it on every supported Node.js; index.mjs hands the same module
// to import, so both ways get the same functions and classes (no second copy whose errors fail instanceof).
'use strict';
const { idempotency, releaseOnError } = require('./src/middleware.cjs');
const { parseKey } = require('./src/key.cjs');
const { DEFAULT_STORED_HEADERS } = require('./src/options.cjs');
const { TransactionEndedError } = require('./src/transaction.cjs');

module.exports = { idempotency, releaseOnError, parseKey, DEFAULT_STORED_HEADERS, TransactionEndedError };
