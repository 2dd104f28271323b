// Types for idem-keys-powertools (hand-written; the package is plain JavaScript).
import { IdempotencyUnknownError } from '@aws-lambda-powertools/idempotency';
import { BasePersistenceLayer, IdempotencyRecord } from '@aws-lambda-powertools/idempotency/persistence';

/** What the layer needs of the database: a pg.Pool, or anything with the same query(). */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

export interface IdemKeysPersistenceLayerOptions {
  /** The database with idem_keys (the extension or the portable edition) installed: a pg.Pool. Required. */
  pool: Queryable;
  /**
   * Whose keys these are: one scope per application or tenant, at most 255 characters. Required: there is no
   * default. With tenant binding on, the tenant or a scope that starts with "<tenant>:".
   */
  scope: string;
  /**
   * How long a call waits for another invocation that holds the same key in progress (it then gets that
   * invocation's result, or runs if that one failed or its lease ran out) before Powertools'
   * IdempotencyAlreadyInProgressError. At most the call's own lease. Default 0: no wait.
   */
  waitSeconds?: number;
}

/** A Powertools persistence layer on idem_keys, with a fencing token per invocation. */
export declare class IdemKeysPersistenceLayer extends BasePersistenceLayer {
  constructor(options: IdemKeysPersistenceLayerOptions);
  /** The idem_keys scope of every key of this layer. */
  get scope(): string;
  protected _putRecord(record: IdempotencyRecord): Promise<void>;
  protected _updateRecord(record: IdempotencyRecord): Promise<void>;
  protected _deleteRecord(record: IdempotencyRecord): Promise<void>;
  protected _getRecord(idempotencyKey: string): Promise<IdempotencyRecord>;
}

/**
 * The invocation's result was not stored because its claim was taken over after its lease ran out (code
 * '55000'), or is gone (code 'P0002'). Powertools raises it as the `cause` of an
 * IdempotencyPersistenceLayerError from the idempotent function.
 */
export declare class IdempotencyLeaseLostError extends IdempotencyUnknownError {
  readonly name: 'IdempotencyLeaseLostError';
  /** Powertools' idempotency key. */
  readonly idempotencyKey: string;
  /** The idem_keys scope and key of the claim. */
  readonly scope: string;
  readonly key: string;
  /** The fencing token that was refused (a bigint as a decimal string). */
  readonly token: string;
  /** The SQLSTATE: '55000' (taken over) or 'P0002' (gone). */
  readonly code: '55000' | 'P0002';
}

/**
 * The result could not be stored: the update found no claim of its invocation (it did not run in the async
 * context of the call that saved the in-progress record, nor with that call's payload object). Powertools raises
 * it as the `cause` of an IdempotencyPersistenceLayerError.
 */
export declare class IdempotencyClaimMissingError extends IdempotencyUnknownError {
  readonly name: 'IdempotencyClaimMissingError';
  readonly idempotencyKey: string;
}

/** The idem_keys key under which a Powertools idempotency key is stored. */
export declare function storeKey(idempotencyKey: string): string;
