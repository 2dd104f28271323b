// One claimed request, from the claim to its key's end: what the handler sees (req.idempotency), and what its
// answer does to the key: stored (idem_finish) before the client sees it, the key given back on a retryable answer
// or an error, or left unsettled. In transactional mode the end is the request's one COMMIT or ROLLBACK.
'use strict';
const { problemAnswer } = require('./answers.cjs');
const { captureResponse } = require('./capture.cjs');
const { finish, release } = require('./store.cjs');
const { rollbackQuietly } = require('./transaction.cjs');

class Attempt {
  constructor(config, res, { scope, key, outcome, token, transaction }) {
    this.config = config;
    this.scope = scope;
    this.key = key;
    this.token = token;
    this.transaction = transaction; // transactional mode: the open transaction, until it ends; else null
    this.unsettled = false;
    this.context = Object.freeze({
      scope,
      key,
      outcome,
      token, // a bigint as a decimal string
      recovered: outcome === 'recovered',
      // Transactional mode: the pg client the handler's database work runs on, inside the transaction that holds
      // the claim and will hold the answer, until the handler answers; its query() then rejects with
      // TransactionEndedError. Undefined otherwise.
      client: transaction?.handlerClient,
      // The outcome is unknown (a payment that may have gone through): the answer is sent but not stored, and
      // the claim stays until its lease ends; the next request then runs with recovered true and reconciles.
      leaveUnsettled: () => {
        this.unsettled = true;
      },
    });
    this.capture = captureResponse(res, (answer) => {
      this.settle(answer).catch((err) => {
        config.logger.error(`idem-keys-express: ${err.message}`, err);
      });
    });
  }

  // The handler answered: keep the answer (or give the key back), then let the client have it.
  async settle(answer) {
    const { config, capture } = this;
    this.transaction?.revoke(); // the client is the handler's until it answers
    if (this.unsettled) {
      // Transactional mode: the handler's writes and the claim commit, the answer is not stored.
      if (this.transaction && !(await this.committed(capture))) return;
      capture.send(answer);
      return;
    }
    if (config.retryableStatuses.has(answer.status)) {
      await this.release(); // before the answer, so a retry that follows it at once finds the key free
      capture.send(answer);
      return;
    }
    try {
      await finish(this.transaction ?? config.pool, this.scope, this.key, this.token, answer,
        storedHeaders(config, answer.headers), config.retention);
    } catch (err) {
      // Transactional mode: nothing is kept, the handler's writes included, and the key is free again.
      if (this.transaction) await this.rollback();
      if (err.code === '55000') {
        // We ran past the lease and another request recovered the key: its answer is the one that counts.
        config.logger.warn(`idem-keys-express: idem_finish ${JSON.stringify(this.key)}: the lease was lost to `
          + 'another request; this answer is dropped');
        capture.send(problemAnswer(capture, 'lease-lost'));
      } else {
        // Too large for idem_keys.max_response_bytes, or the database went away: the claim stays until its lease
        // ends, and the retry after that runs as recovered.
        config.logger.error(`idem-keys-express: idem_finish ${JSON.stringify(this.key)}: ${err.message}`, err);
        capture.send(problemAnswer(capture, 'store-failed'));
      }
      return;
    }
    // Only a committed answer reaches the client: a failed COMMIT stored nothing and kept none of the handler's
    // writes, so the retry runs it again; after a COMMIT whose answer never came, the retry finds out which.
    if (this.transaction && !(await this.committed(capture))) return;
    capture.send(answer);
  }

  // Transactional mode: commits; when that did not certainly work, answers 503 in place of the handler's answer,
  // commit-failed (nothing was committed: rolled back, or the connection lost before the COMMIT) or commit-unknown
  // (maybe it was), and tells so.
  async committed(capture) {
    const outcome = await this.commit();
    if (outcome === 'committed') return true;
    capture.send(problemAnswer(capture, outcome === 'unknown' ? 'commit-unknown' : 'commit-failed'));
    return false;
  }

  // Gives the key back: by default idem_release; in transactional mode ROLLBACK, which takes the handler's writes
  // with it. A failure is only logged: the claim then runs out its lease and the next retry recovers it (in the
  // mode, the transaction ends with the destroyed connection, and the key is free).
  async release() {
    if (this.transaction) {
      await this.rollback();
      return;
    }
    try {
      await release(this.config.pool, this.scope, this.key, this.token);
    } catch (err) {
      this.config.logger.warn(`idem-keys-express: idem_release ${JSON.stringify(this.key)}: ${err.message}`, err);
    }
  }

  // Transactional mode. 'committed', 'rolled-back', 'lost' or 'unknown' (transaction.cjs); a failure is logged.
  // Either way the client has gone back to the pool (or been destroyed) and is the handler's no more.
  async commit() {
    const { outcome, error } = await this.takeTransaction().commit();
    const key = JSON.stringify(this.key);
    if (outcome === 'rolled-back') {
      this.config.logger.error(`idem-keys-express: COMMIT for ${key}: ${error.message}; nothing was stored and the `
        + 'handler\'s writes are gone', error);
    } else if (outcome === 'lost') {
      this.config.logger.error(`idem-keys-express: COMMIT for ${key}: not sent: the connection was lost before the `
        + 'COMMIT: nothing was committed (the server rolled the transaction back with the session); nothing was '
        + `stored and the handler's writes are gone (${error.message})`, error);
    } else if (outcome === 'unknown') {
      this.config.logger.error(`idem-keys-express: COMMIT for ${key}: ${error.message}; its answer never came, so `
        + 'the outcome is unknown: the handler\'s writes and the answer may or may not have been committed. A retry '
        + 'with the same Idempotency-Key resolves it: it replays the stored answer if the commit happened, or runs '
        + 'the request afresh if it did not', error);
    }
    return outcome;
  }

  async rollback() {
    await rollbackQuietly(this.takeTransaction(), this.config.logger, this.key);
  }

  // The transaction, once: whatever happens next ends it, and nothing may end it twice.
  takeTransaction() {
    const { transaction } = this;
    this.transaction = null;
    return transaction;
  }
}

// The allow-listed headers of an answer, as idem_finish stores them: name -> value, several values joined.
function storedHeaders(config, headers) {
  const stored = {};
  for (const [name, value] of headers) {
    if (config.storedHeaders.has(name.toLowerCase())) stored[name] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return stored;
}

module.exports = { Attempt };
