// idempotency(): the Express middleware. It reads the key and the body, claims the key with idem_claim, turns
// the outcome into an answer or runs the rest of the app, and keeps the app's answer with idem_finish before
// the client sees it. The behaviour is docs/integrations.md's, the same as the Go and Python packages'.
// In transactional mode the claim, the handler's database work (on req.idempotency.client) and the finish are one
// transaction on one client of the pool (transaction.js), committed once, before the client sees the answer.
import { BodyTooLargeError, isJsonBody, readBody, replayBody } from './body.js';
import { captureResponse } from './capture.js';
import { requestKey } from './key.js';
import { resolveOptions } from './options.js';
import { problem } from './problems.js';
import { claim, finish, release } from './store.js';
import { beginTransaction } from './transaction.js';

// Where the claimed attempt's bookkeeping lives on req, for releaseOnError().
const ATTEMPT = Symbol('idem-keys-express attempt');

export function idempotency(options) {
  const config = resolveOptions(options);
  return function idempotencyMiddleware(req, res, next) {
    let handedOver = false;
    const onward = (err) => {
      handedOver = true;
      next(err);
    };
    handle(config, req, res, onward).catch((err) => {
      // Our own failure before the rest of the app ran goes to Express's error path; after, it is only logged
      // (the app owns the request by then).
      if (!handedOver) onward(err);
      else config.logger.error(`idem-keys-express: ${err.message}`, err);
    });
  };
}

// The first error handler after the routes: a handler that failed (threw, rejected, called next(err)) before
// answering gets its key released, so a retry runs again, unless it left the key unsettled; the error goes on
// to Express's error path. In transactional mode the key is released by rolling the transaction back, with the
// handler's writes; an unsettled key is committed with them.
// Express gives a middleware no view of errors raised after it, hence this second piece.
export function releaseOnError() {
  return function idempotencyReleaseOnError(err, req, res, next) {
    const attempt = req[ATTEMPT];
    if (!attempt || attempt.capture.state !== 'capturing') {
      next(err);
      return;
    }
    attempt.capture.passThrough();
    // A handler that said it cannot tell what happened (leaveUnsettled) and then failed still meant it: the key
    // stays claimed until its lease ends, and the retry after that runs as recovered.
    if (attempt.unsettled) {
      if (attempt.transaction) attempt.commit().then(() => next(err));
      else next(err);
      return;
    }
    attempt.release().then(() => next(err));
  };
}

async function handle(config, req, res, next) {
  if (!config.methods.has(req.method)) {
    next();
    return;
  }
  const found = requestKey(req);
  if (found.missing) {
    if (config.required) sendProblem(res, 'key-missing');
    else next();
    return;
  }
  if (found.malformed) {
    sendProblem(res, 'key-malformed');
    return;
  }
  const { key } = found;

  const scope = await config.scope(req);
  if (typeof scope !== 'string' || scope === '') {
    config.logger.error(`idem-keys-express: scope() gave no scope for ${req.method} ${req.originalUrl ?? req.url}; `
      + 'run idempotency() after authentication');
    sendProblem(res, 'scope-missing');
    return;
  }

  let body;
  try {
    body = await readBody(req, config.limit);
  } catch (err) {
    if (!(err instanceof BodyTooLargeError)) throw err;
    res.setHeader('Connection', 'close'); // what is left of the body is discarded, and the connection with it
    sendProblem(res, 'body-too-large');
    return;
  }
  // The target as the client sent it: originalUrl, because a mount path (app.use('/api', ...)) rewrites req.url.
  const request = { method: req.method, target: req.originalUrl ?? req.url, body, json: isJsonBody(req, body) };

  // Transactional mode: the claim opens the request's transaction, on a client that stays with the request.
  const transactional = config.transactional(req);
  let transaction = null;
  let row;
  try {
    if (transactional) transaction = await beginTransaction(config.pool);
    row = await claim(transaction ?? config.pool, scope, key, request, config, transactional);
  } catch (err) { // no connection, BEGIN failed (the client is given back), or the claim failed
    config.logger.error(`idem-keys-express: idem_claim ${JSON.stringify(key)}: ${err.message}`, err);
    if (transaction) await rollbackQuietly(config, transaction, key);
    sendProblem(res, 'store-unavailable', [['Retry-After', '1']]);
    return;
  }

  const outcome = row && row.outcome;
  // Anything but a claim wrote nothing: the transaction ends here, the handler does not run.
  if (transaction && outcome !== 'claimed' && outcome !== 'recovered') await rollbackQuietly(config, transaction, key);
  const outcomeHeader = config.outcomeHeader ? [[config.outcomeHeader, outcome]] : [];
  switch (outcome) {
    case 'replay':
      sendReplay(res, row, [...outcomeHeader, ['Idempotent-Replayed', 'true']]);
      return;
    case 'in_progress':
      sendProblem(res, 'request-in-progress', [...outcomeHeader,
        ['Retry-After', String(Math.max(1, Number(row.retry_after) || 0))]]);
      return;
    case 'mismatch':
      sendProblem(res, 'key-reused', outcomeHeader);
      return;
    case 'claimed':
    case 'recovered':
      break;
    default:
      config.logger.error(`idem-keys-express: idem_claim ${JSON.stringify(key)}: unexpected outcome ${outcome}`);
      sendProblem(res, 'store-unavailable', [['Retry-After', '1']]);
      return;
  }

  for (const [name, value] of outcomeHeader) res.setHeader(name, value);
  const attempt = new Attempt(config, res, { scope, key, outcome, token: row.token, transaction });
  // The client hung up while the key was being claimed. Nobody is left to answer, and a body parser would skip
  // the replayed body (body-parser treats a request whose socket is gone as finished), so the handler would see
  // none and its 400 would become the key's stored answer. The key goes back instead, and the retry runs.
  if (clientGone(req)) {
    await attempt.release();
    config.logger.warn(`idem-keys-express: the client of ${JSON.stringify(key)} hung up before the handler ran; `
      + 'the key was released');
    return;
  }
  req.idempotency = attempt.context;
  req[ATTEMPT] = attempt;
  replayBody(req, body);
  next();
}

// Whether the request's connection can no longer carry an answer: as on-finished (and so body-parser) sees it.
function clientGone(req) {
  const { socket } = req;
  return !socket || socket.destroyed || !socket.readable;
}

// A failed ROLLBACK is only logged: rollback() has destroyed the client, and PostgreSQL ends the transaction with
// the connection.
async function rollbackQuietly(config, transaction, key) {
  try {
    await transaction.rollback();
  } catch (err) {
    config.logger.warn(`idem-keys-express: ROLLBACK for ${JSON.stringify(key)}: ${err.message}`, err);
  }
}

// One claimed request: what the handler sees (context) and what becomes of its key.
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
      token, // a bigint as a string, exactly as idem_claim gave it
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
        capture.send(problemAnswer(capture, 'lease-lost', [['Retry-After', '1']]));
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
    capture.send(problemAnswer(capture, outcome === 'unknown' ? 'commit-unknown' : 'commit-failed',
      [['Retry-After', '1']]));
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

  // Transactional mode. 'committed', 'rolled-back', 'lost' or 'unknown' (transaction.js); a failure is logged.
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
    await rollbackQuietly(this.config, this.takeTransaction(), this.key);
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

function sendReplay(res, row, extra) {
  for (const [name, value] of Object.entries(row.headers || {})) res.setHeader(name, value);
  for (const [name, value] of extra) res.setHeader(name, value);
  res.statusCode = row.status_code;
  res.end(row.response_bytes || undefined);
}

// A problem answer in place of the handler's: the headers set before the middleware ran, and the problem's.
function problemAnswer(capture, code, extra = []) {
  const { status, body } = problem(code);
  const kept = capture.initialHeaders.filter(([name]) => !/^content-/i.test(name));
  return { status, headers: [...kept, ...extra, ['Content-Type', 'application/problem+json']], body };
}

function sendProblem(res, code, extra = []) {
  const { status, body } = problem(code);
  for (const [name, value] of extra) res.setHeader(name, value);
  res.setHeader('Content-Type', 'application/problem+json');
  res.statusCode = status;
  res.end(body);
}
