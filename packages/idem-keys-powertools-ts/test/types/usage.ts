// Compiled by `tsc -p test/types` (npm test): the README's usage type-checks against index.d.ts and Powertools'
// own types, with skipLibCheck off so that index.d.ts itself is checked too.
import pg from 'pg';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import type { BasePersistenceLayer } from '@aws-lambda-powertools/idempotency/persistence';
import { makeHandlerIdempotent } from '@aws-lambda-powertools/idempotency/middleware';
import {
  IdemKeysPersistenceLayer,
  IdempotencyClaimMissingError,
  IdempotencyLeaseLostError,
  IdempotencyUnsupportedPowertoolsError,
  storeKey,
  type IdemKeysPersistenceLayerOptions,
} from 'idem-keys-powertools';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const options: IdemKeysPersistenceLayerOptions = { pool, scope: 'orders', waitSeconds: 2, leaseSeconds: 30 };
const persistenceStore = new IdemKeysPersistenceLayer(options);
const base: BasePersistenceLayer = persistenceStore;
const scope: string = persistenceStore.scope;
const key: string = storeKey('orders#abc');

interface Order { orderId: string; amount: number }
interface Context { getRemainingTimeInMillis(): number }

const config = new IdempotencyConfig({ eventKeyJmesPath: 'orderId', payloadValidationJmesPath: 'amount' });
export const handler = makeIdempotent(
  async (event: Order, _context: Context): Promise<{ charged: number }> => ({ charged: event.amount }),
  { persistenceStore, config },
);
export const middleware = makeHandlerIdempotent({ persistenceStore });

export function describe(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause instanceof IdempotencyLeaseLostError) {
    const code: '55000' | 'P0002' = cause.code;
    return `${cause.idempotencyKey} ${cause.scope} ${cause.key} ${cause.token} ${code}`;
  }
  if (cause instanceof IdempotencyClaimMissingError) return cause.idempotencyKey;
  // Thrown by the constructor, or by the first call as the cause of Powertools' persistence error.
  const refusal = cause instanceof IdempotencyUnsupportedPowertoolsError ? cause : error;
  if (refusal instanceof IdempotencyUnsupportedPowertoolsError) {
    return `${refusal.powertoolsVersion}: ${refusal.findings.join('; ')}`;
  }
  return `${base} ${scope} ${key}`;
}

// @ts-expect-error: the scope is required
new IdemKeysPersistenceLayer({ pool });
