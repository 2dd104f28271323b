// idem-keys-express: Idempotency-Key middleware for Express 4 and 5 on PostgreSQL's idem_keys.
export { idempotency, releaseOnError } from './src/middleware.js';
export { parseKey } from './src/key.js';
export { DEFAULT_STORED_HEADERS } from './src/options.js';
export { TransactionEndedError } from './src/transaction.js';
