// Types for idem-keys-express (hand-written; the package is plain JavaScript): these for require (index.cjs), and
// the same through index.d.ts for import (index.mjs re-exports index.cjs).
import type { IncomingMessage, ServerResponse } from 'node:http';

/** What idempotency() needs of the database: a pg.Pool, or anything with the same query(). */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** What transactional mode needs of the database: a pg.Pool, whose connect() gives a client of its own. */
export interface ConnectablePool extends Queryable {
  connect(): Promise<PooledClient>;
}

/** A client of the pool (a pg.PoolClient): release(err) with an error destroys it instead of pooling it. */
export interface PooledClient extends Queryable {
  release(err?: Error | boolean): void;
}

/** Where the middleware reports what went wrong; console by default. */
export interface IdempotencyLogger {
  warn(message: string, ...rest: unknown[]): void;
  error(message: string, ...rest: unknown[]): void;
}

/** A duration in seconds (0.5, 30, 120), as every idem_keys middleware takes it. */
export type Seconds = number;

/** The options but pool and transactional, which go together: see IdempotencyOptions. */
export interface IdempotencyBaseOptions<Req extends IncomingMessage = IncomingMessage> {
  /**
   * Whose request this is, from its authentication (never from a header the client sets). Required: there is no
   * default scope. No scope (undefined, null, '') answers 500 scope-missing.
   */
  scope: (req: Req) => string | undefined | null | Promise<string | undefined | null>;
  /**
   * How long a claim holds before another request may recover the key, in seconds: longer than the handler ever
   * runs. Default: the server's idem_keys.lease.
   */
  lease?: Seconds | null;
  /** How long a duplicate waits for the first attempt before 409, in seconds. Default: no wait. */
  wait?: Seconds | null;
  /** How long an answer is replayed, in seconds. Default: the server's idem_keys.retention. */
  retention?: Seconds | null;
  /** The methods that take keys. Default ['POST', 'PATCH']. */
  methods?: string[];
  /** Whether a request without a key gets 400 key-missing. Default true. */
  required?: boolean;
  /** Answers that release the key instead of being stored. Default [429, 503]. */
  retryableStatuses?: number[];
  /** The response headers a replay repeats (case-insensitive). Default DEFAULT_STORED_HEADERS. */
  storedHeaders?: string[];
  /** A response header naming the outcome (claimed, recovered, replay, in_progress, mismatch). Default none. */
  outcomeHeader?: string | null;
  /** Default console. */
  logger?: IdempotencyLogger;
  /** The largest request body read for the fingerprint, in bytes; larger gets 413 body-too-large. Default 1 MiB. */
  maxBodyBytes?: number;
}

export type IdempotencyOptions<Req extends IncomingMessage = IncomingMessage> = IdempotencyBaseOptions<Req> & ({
  /** The database with idem_keys installed: a pg.Pool. Required. */
  pool: Queryable;
  /** Transactional mode off (the default): the claim, the handler's work and the finish commit apart. */
  transactional?: false;
} | {
  /** The database with idem_keys installed: a pg.Pool. Required; transactional mode needs its connect(). */
  pool: ConnectablePool;
  /**
   * Transactional mode, for every request (true) or those a function picks: the claim, the handler's database
   * work on req.idempotency.client and the finish are one transaction, committed once before the answer is sent.
   * The handler must not COMMIT or ROLLBACK (savepoints are fine). A failed COMMIT, or one not sent because the
   * connection was lost before it, answers 503 commit-failed; one whose answer never came (the connection lost
   * while it ran) or was a PANIC, 503 commit-unknown.
   */
  transactional: boolean | ((req: Req) => boolean);
});

/** The claimed attempt, as the handler sees it: req.idempotency. */
export interface IdempotencyAttempt {
  readonly scope: string;
  readonly key: string;
  readonly outcome: 'claimed' | 'recovered';
  /** The fencing token, a bigint as a decimal string. */
  readonly token: string;
  /** A previous owner died holding the key: look for what it did before acting again. */
  readonly recovered: boolean;
  /**
   * Transactional mode: the pool's client (a pg.PoolClient) with the request's transaction open, for the handler's
   * database work until it answers; undefined otherwise. Once the handler has answered (or failed), its query()
   * rejects with TransactionEndedError (a callback gets the error). Never COMMIT or ROLLBACK on it: the middleware
   * does; its release() throws.
   */
  readonly client?: Queryable;
  /**
   * The outcome is unknown ("maybe charged"): send the answer without storing it; the claim runs out its lease.
   * In transactional mode the transaction commits, with the claim, and no answer.
   */
  leaveUnsettled(): void;
}

export type Middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
export type ErrorMiddleware = (err: unknown, req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;

/**
 * The middleware. Mount it after authentication and before any body parser, app-wide or on one route. Throws
 * TypeError without pool or scope, with an unknown option, a duration that is not a number of seconds, or
 * transactional and a pool without connect().
 */
export function idempotency<Req extends IncomingMessage = any>(options: IdempotencyOptions<Req>): Middleware;

/**
 * The first error handler after the routes: a failed handler's key is released (unless it called leaveUnsettled()),
 * then the error goes on. In transactional mode, released by ROLLBACK (the handler's writes too); unsettled: COMMIT.
 */
export function releaseOnError(): ErrorMiddleware;

/**
 * What req.idempotency.client's query() rejects with once the handler has answered or failed: the middleware ends the
 * transaction then, and the client goes back to the pool.
 */
export class TransactionEndedError extends Error {
  readonly name: 'TransactionEndedError';
  readonly code: 'IDEM_KEYS_TRANSACTION_ENDED';
}

/** The key in one Idempotency-Key value, bare or quoted, or null when it is malformed. */
export function parseKey(value: string): string | null;

export const DEFAULT_STORED_HEADERS: readonly string[];

declare global {
  namespace Express {
    interface Request {
      /** Set by idem-keys-express on a claimed request. */
      idempotency?: IdempotencyAttempt;
    }
  }
}
