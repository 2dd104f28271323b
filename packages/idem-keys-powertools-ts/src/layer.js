// The persistence layer: Powertools' four storage methods as calls of the idem_keys SQL API. It keeps no table
// of its own; what is stored where is in the README ("What is stored where").
import {
  IdempotencyInconsistentStateError,
  IdempotencyItemAlreadyExistsError,
  IdempotencyItemNotFoundError,
  IdempotencyRecordStatus,
} from '@aws-lambda-powertools/idempotency';
import { BasePersistenceLayer, IdempotencyRecord } from '@aws-lambda-powertools/idempotency/persistence';
import { ClaimRegistry } from './claims.js';
import { checkPowertools, contextRefusal } from './compatibility.js';
import { IdempotencyClaimMissingError, IdempotencyLeaseLostError } from './errors.js';
import { characters, MAX_CHARACTERS, storeKey } from './keys.js';

// Values are always bound parameters. The casts pick the overloads: a jsonb request, a bytea response.
const CLAIM = `SELECT r.outcome, r.token, r.response_bytes, r.headers, r.retry_after
  FROM idem_claim($1::text, $2::text, $3::jsonb, lease => $4::interval, wait => $5::interval) AS r`;
const FINISH = `SELECT idem_finish($1::text, $2::text, $3::bigint, 200, $4::bytea, headers => $5::jsonb,
  retention => $6::interval)`;
const RELEASE = 'SELECT idem_release($1::text, $2::text, $3::bigint) AS released';
const LOOKUP = `SELECT r.outcome, r.response_bytes, r.headers, r.retry_after
  FROM idem_lookup($1::text, $2::text) AS r`;

// A claim whose key vanished between idem_claim's mismatch and the lookup that reads the record is claimed
// again; twice in a row means something else is deleting keys as fast as they are made.
const MISMATCH_ATTEMPTS = 3;

// The lease of a claim made with no Lambda remaining time to go by (no context registered, or 0 left), unless
// leaseSeconds says otherwise. Long enough for the calls Powertools usually wraps outside Lambda's deadline (a
// request API Gateway gives up on after 29 s, a message SQS redelivers after its default 30 s visibility
// timeout): their retries find the key in progress while the first call may still finish. Short enough that a
// caller that crashed or hung frees its key within a minute, not at the record's expiry (an hour by default).
const DEFAULT_LEASE_SECONDS = 60;

export class IdemKeysPersistenceLayer extends BasePersistenceLayer {
  #pool;
  #scope;
  #waitMs;
  #leaseMs;
  #claims = new ClaimRegistry();
  #payload; // the payload of the step running right now (see #step)

  constructor(options) {
    super();
    const { pool, scope, waitSeconds = 0, leaseSeconds = DEFAULT_LEASE_SECONDS, ...unknown } = options ?? {};
    if (Object.keys(unknown).length) {
      throw new TypeError(`idem-keys-powertools: unknown option ${Object.keys(unknown).join(', ')} (the options are `
        + 'pool, scope, waitSeconds and leaseSeconds; Powertools\' own settings go in its IdempotencyConfig)');
    }
    if (!pool || typeof pool.query !== 'function') {
      throw new TypeError('idem-keys-powertools: `pool` is required: a pg.Pool, or anything with its query()');
    }
    // No default scope: two applications (or tenants) sharing a default would replay each other's results.
    if (typeof scope !== 'string' || scope === '') {
      throw new TypeError('idem-keys-powertools: `scope` is required: a non-empty string naming the application '
        + 'or tenant whose keys these are (with tenant binding, the tenant or "<tenant>:<something>")');
    }
    if (characters(scope) > MAX_CHARACTERS) {
      throw new RangeError(`idem-keys-powertools: \`scope\` is ${characters(scope)} characters long; idem_keys `
        + `takes at most ${MAX_CHARACTERS}`);
    }
    if (typeof waitSeconds !== 'number') {
      throw new TypeError(`idem-keys-powertools: \`waitSeconds\` must be a number of seconds, not ${typeof waitSeconds}`);
    }
    if (!(waitSeconds >= 0) || !Number.isFinite(waitSeconds)) {
      throw new RangeError(`idem-keys-powertools: \`waitSeconds\` must be a number of seconds, 0 or more, not ${waitSeconds}`);
    }
    if (typeof leaseSeconds !== 'number') {
      throw new TypeError(`idem-keys-powertools: \`leaseSeconds\` must be a number of seconds, not ${typeof leaseSeconds}`);
    }
    // At least a millisecond: idem_claim refuses a lease of 0.
    if (!(leaseSeconds >= 0.001) || !Number.isFinite(leaseSeconds)) {
      throw new RangeError(`idem-keys-powertools: \`leaseSeconds\` must be a number of seconds, 0.001 or more, not ${leaseSeconds}`);
    }
    // Refuses a Powertools that does not call the layer as the fencing needs (src/compatibility.js).
    checkPowertools();
    this.#pool = pool;
    this.#scope = scope;
    this.#waitMs = Math.round(waitSeconds * 1000);
    this.#leaseMs = Math.round(leaseSeconds * 1000);
  }

  /** The idem_keys scope of every key of this layer. */
  get scope() {
    return this.#scope;
  }

  // Powertools calls configure() synchronously at the start of every call (and ignores all but the first
  // configuration): the moment a new invocation begins.
  configure(options) {
    super.configure(options);
    this.#claims.begin();
  }

  // The public steps are overridden only to let the storage methods see the payload: each base method calls
  // its storage method before its first await (checked by src/compatibility.js), so the field is read while it
  // holds this step's payload. Arguments after the payload are passed on as they come.
  saveInProgress(data, ...rest) {
    return this.#step(data, () => super.saveInProgress(data, ...rest));
  }

  saveSuccess(data, ...rest) {
    return this.#step(data, () => super.saveSuccess(data, ...rest));
  }

  deleteRecord(data, ...rest) {
    return this.#step(data, () => super.deleteRecord(data, ...rest));
  }

  #step(data, run) {
    this.#payload = data;
    try {
      return run();
    } finally {
      this.#payload = undefined;
    }
  }

  // Saves the in-progress record: idem_claim. claimed or recovered (the previous owner's lease ran out) is this
  // invocation's claim, and its token is kept for the update or delete; anything else is an existing record.
  async _putRecord(record) {
    const payload = this.#payload; // before any await
    const refused = await contextRefusal();
    if (refused) throw refused;
    const key = storeKey(record.idempotencyKey);
    // The lease ends when Powertools says the in-progress record does: the Lambda's remaining time. Without it
    // (no Lambda context, or 0 ms left, which Powertools takes for none), after leaseSeconds, and no later than
    // the record's expiry, as Powertools' own stores let such a record live. Sent as a duration, so the
    // client's and the server's clocks need not agree.
    const leaseEnd = record.inProgressExpiryTimestamp
      ?? Math.min(Date.now() + this.#leaseMs, record.expiryTimestamp * 1000);
    const leaseMs = Math.max(1, Math.round(leaseEnd - Date.now()));
    // The payload hash (empty when payloadValidationJmesPath is not set) is the request idem_claim fingerprints,
    // so the same key with another payload comes back as mismatch, in progress or finished.
    const request = JSON.stringify({ validation: record.payloadHash ?? '' });
    const wait = milliseconds(Math.min(this.#waitMs, leaseMs));
    this.#claims.trying(record.idempotencyKey, payload);
    for (let attempt = 1; ; attempt++) {
      const { rows: [row] } = await this.#pool.query(CLAIM, [this.#scope, key, request, milliseconds(leaseMs), wait]);
      switch (row.outcome) {
        case 'claimed':
        case 'recovered':
          this.#claims.hold(record.idempotencyKey, payload, row.token);
          return;
        case 'replay':
          throw exists(record, completedRecord(record.idempotencyKey, row));
        case 'in_progress':
          throw exists(record, inProgressRecord(record.idempotencyKey, row.retry_after, record.payloadHash));
        case 'mismatch': {
          // The claim does not return the stored record; the lookup does, and Powertools decides with it:
          // IdempotencyValidationError when payloadValidationJmesPath is set, else the record as it is.
          const existing = await this.#lookup(record.idempotencyKey);
          if (existing) throw exists(record, existing);
          if (attempt >= MISMATCH_ATTEMPTS) {
            throw new IdempotencyInconsistentStateError(`idem_claim said mismatch but the key was gone, ${attempt} times`);
          }
          continue;
        }
        default:
          throw new Error(`idem-keys-powertools: idem_claim returned an unknown outcome: ${row.outcome}`);
      }
    }
  }

  // Saves the result: idem_finish with this invocation's token. A token that no longer owns the key (another
  // invocation took it over after the lease ran out) is refused with 55000, and the owner's record stays.
  async _updateRecord(record) {
    const payload = this.#payload; // before any await
    const token = this.#claims.get(record.idempotencyKey, payload);
    if (token === undefined) throw claimMissing(record);
    const key = storeKey(record.idempotencyKey);
    const json = record.responseData === undefined ? undefined : JSON.stringify(record.responseData);
    const response = json === undefined ? null : Buffer.from(json, 'utf8');
    // What Powertools needs besides the result to rebuild the record, under its own attribute names.
    const attributes = JSON.stringify({ expiration: record.expiryTimestamp, validation: record.payloadHash ?? '' });
    // Replayed until the record's expiry (expiresAfterSeconds), sent as a duration like the lease.
    const retentionMs = Math.max(1, Math.round(record.expiryTimestamp * 1000 - Date.now()));
    try {
      await this.#pool.query(FINISH, [this.#scope, key, token, response, attributes, milliseconds(retentionMs)]);
    } catch (error) {
      // 55000: the token was fenced out by a takeover. P0002: the claim is gone altogether (swept long after
      // its lease ended). Either way the function ran and its result is not stored.
      if (error?.code === '55000' || error?.code === 'P0002') {
        this.#claims.forget(record.idempotencyKey, payload);
        throw new IdempotencyLeaseLostError(
          `The result was not stored: this invocation's claim of idempotency key ${record.idempotencyKey} `
            + `(token ${token}) ${error.code === '55000' ? 'was taken over by another invocation after its lease ran out' : 'no longer exists'}`,
          { idempotencyKey: record.idempotencyKey, scope: this.#scope, key, token, code: error.code },
          { cause: error },
        );
      }
      // Kept: the claim is still this invocation's, and Middy's onError hook deletes the record next.
      throw error;
    }
    this.#claims.forget(record.idempotencyKey, payload);
  }

  // The function failed: idem_release with this invocation's token, so that the next call runs again. An
  // invocation that holds no claim of the key releases nothing: it did not get the key (Middy's onError hook
  // runs after an in-progress or validation error too), or another invocation took the key over meanwhile
  // (then idem_release says false). Either way the key is left to its owner, and the caller gets the
  // function's own error.
  async _deleteRecord(record) {
    const payload = this.#payload; // before any await
    const token = this.#claims.get(record.idempotencyKey, payload);
    if (token === undefined) return;
    this.#claims.forget(record.idempotencyKey, payload);
    try {
      await this.#pool.query(RELEASE, [this.#scope, storeKey(record.idempotencyKey), token]);
    } catch (error) {
      if (error?.code !== 'P0002') throw error; // P0002: the key is gone already
    }
  }

  // idem_lookup: the finished or in-progress record, as the store has it now.
  async _getRecord(idempotencyKey) {
    const record = await this.#lookup(idempotencyKey);
    if (!record) throw new IdempotencyItemNotFoundError(`No record for idempotency key: ${idempotencyKey}`);
    return record;
  }

  async #lookup(idempotencyKey) {
    const { rows: [row] } = await this.#pool.query(LOOKUP, [this.#scope, storeKey(idempotencyKey)]);
    if (row.outcome === 'replay') return completedRecord(idempotencyKey, row);
    // The claim's payload hash is stored only as its fingerprint, which a lookup does not return.
    if (row.outcome === 'in_progress') return inProgressRecord(idempotencyKey, row.retry_after, undefined);
    return undefined; // NULL: unknown, or its answer expired
  }
}

function completedRecord(idempotencyKey, row) {
  const attributes = row.headers ?? {};
  return new IdempotencyRecord({
    idempotencyKey,
    status: IdempotencyRecordStatus.COMPLETED,
    expiryTimestamp: attributes.expiration,
    responseData: row.response_bytes === null ? undefined : JSON.parse(row.response_bytes.toString('utf8')),
    payloadHash: attributes.validation,
  });
}

// No expiryTimestamp: the server has just said the claim is live, and Powertools would take a past one as
// EXPIRED. retry_after is the seconds until the lease ends, rounded up.
function inProgressRecord(idempotencyKey, retryAfter, payloadHash) {
  return new IdempotencyRecord({
    idempotencyKey,
    status: IdempotencyRecordStatus.INPROGRESS,
    inProgressExpiryTimestamp: Date.now() + retryAfter * 1000,
    payloadHash,
  });
}

const exists = (record, existing) => new IdempotencyItemAlreadyExistsError(
  `Failed to put record for already existing idempotency key: ${record.idempotencyKey}`, existing);

const claimMissing = (record) => new IdempotencyClaimMissingError(
  `No claim of this invocation to store the result of idempotency key ${record.idempotencyKey} with: the update `
    + 'did not run in the async context of the call that saved the in-progress record, nor with its payload object',
  { idempotencyKey: record.idempotencyKey });

const milliseconds = (ms) => `${ms} milliseconds`;
