// idem-keys-express for import: the CommonJS implementation (index.cjs), re-exported by name, so a program that
// both imports and requires the package holds one copy of it.
import implementation from './index.cjs';

export const { idempotency, releaseOnError, parseKey, DEFAULT_STORED_HEADERS, TransactionEndedError } = implementation;
