// idem-keys-powertools: a persistence layer for Powertools for AWS Lambda (TypeScript) idempotency on
// PostgreSQL's idem_keys (the extension or its portable edition).
export { IdemKeysPersistenceLayer } from './src/layer.js';
export {
  IdempotencyClaimMissingError,
  IdempotencyLeaseLostError,
  IdempotencyUnsupportedPowertoolsError,
} from './src/errors.js';
export { storeKey } from './src/keys.js';
