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
  /**
   * The lease of a claim made without a Lambda remaining time (no Lambda context registered, or 0 ms left,
   * which Powertools takes for none): after it another invocation may take the key over. No longer than the
   * record's expiry (expiresAfterSeconds). With a remaining time, the lease is that and this is not used.
   * Default 60; at least 0.001.
   */
  leaseSeconds?: number;
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

/**
 * The installed Powertools does not call the layer the way its fencing needs: a step (saveInProgress,
 * saveSuccess, deleteRecord) that does not call its storage method before its first await, or a call whose
 * storage methods do not run in the async context of its configure(). Thrown by the constructor, or by the
 * first claim (then as the `cause` of Powertools' IdempotencyPersistenceLayerError), instead of running unfenced.
 */
export declare class IdempotencyUnsupportedPowertoolsError extends IdempotencyUnknownError {
  readonly name: 'IdempotencyUnsupportedPowertoolsError';
  /** The installed @aws-lambda-powertools/idempotency's version, from its package.json. */
  readonly powertoolsVersion: string;
  /** What the probe found, one sentence each. */
  readonly findings: readonly string[];
}

/** The idem_keys key under which a Powertools idempotency key is stored. */
export declare function storeKey(idempotencyKey: string): string;
