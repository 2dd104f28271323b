// The errors this layer adds to Powertools' own. Both extend IdempotencyUnknownError, the base of every
// Powertools idempotency error. When they come out of an update or a delete, Powertools wraps them in an
// IdempotencyPersistenceLayerError whose `cause` is one of these.
import { IdempotencyUnknownError } from '@aws-lambda-powertools/idempotency';

// The invocation's claim was taken over (its lease ran out and another invocation recovered the key), or the
// claim is gone: idem_finish refused the write (SQLSTATE 55000, or P0002 once the key was swept). The function
// ran, but its result is not stored; the record of the invocation that owns the key now is left as it is.
export class IdempotencyLeaseLostError extends IdempotencyUnknownError {
  constructor(message, { idempotencyKey, scope, key, token, code }, options) {
    super(message, options);
    this.name = 'IdempotencyLeaseLostError';
    this.idempotencyKey = idempotencyKey;
    this.scope = scope;
    this.key = key;
    this.token = token;
    this.code = code;
  }
}

// An update (the function's result) with no claim of the same invocation to fence it with: it did not run in
// the async context of the call that saved the in-progress record, nor with that call's payload object.
export class IdempotencyClaimMissingError extends IdempotencyUnknownError {
  constructor(message, { idempotencyKey }, options) {
    super(message, options);
    this.name = 'IdempotencyClaimMissingError';
    this.idempotencyKey = idempotencyKey;
  }
}

// The installed Powertools does not call the layer the way the layer needs to tie each write to the invocation
// that made it (src/compatibility.js says what is checked). Raised by the constructor, or by the first claim
// (then as the `cause` of Powertools' IdempotencyPersistenceLayerError), instead of running unfenced.
export class IdempotencyUnsupportedPowertoolsError extends IdempotencyUnknownError {
  constructor(message, { powertoolsVersion, findings }, options) {
    super(message, options);
    this.name = 'IdempotencyUnsupportedPowertoolsError';
    this.powertoolsVersion = powertoolsVersion;
    this.findings = findings;
  }
}
