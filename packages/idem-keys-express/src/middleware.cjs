// idempotency(): the Express middleware. It reads the key and the body, claims the key with idem_claim, and turns
// the outcome into an answer or runs the rest of the app with the claimed attempt (attempt.cjs), which keeps the
// app's answer before the client sees it. The behaviour is docs/integrations.md's, the same in every idem_keys
// middleware. In transactional mode the claim opens the request's transaction on a client of the pool
// (transaction.cjs), and the attempt commits it once, before the client sees the answer.
'use strict';
const { sendProblem, sendReplay } = require('./answers.cjs');
const { Attempt } = require('./attempt.cjs');
const { BodyConsumedError, BodyTooLargeError, isJsonBody, readBody, replayBody } = require('./body.cjs');
const { requestKey } = require('./key.cjs');
const { resolveOptions } = require('./options.cjs');
const { claim } = require('./store.cjs');
const { beginTransaction, rollbackQuietly } = require('./transaction.cjs');

// Where the claimed attempt lives on req, for releaseOnError().
const ATTEMPT = Symbol('idem-keys-express attempt');

function idempotency(options) {
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
function releaseOnError() {
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
  // The target as the client sent it: originalUrl, because a mount path (app.use('/api', ...)) rewrites req.url.
  const target = req.originalUrl ?? req.url;

  const scope = await config.scope(req);
  if (typeof scope !== 'string' || scope === '') {
    config.logger.error(`idem-keys-express: scope() gave no scope for ${req.method} ${target}; `
      + 'run idempotency() after authentication');
    sendProblem(res, 'scope-missing');
    return;
  }

  let body;
  try {
    body = await readBody(req, config.maxBodyBytes);
  } catch (err) {
    if (err instanceof BodyConsumedError) throw err; // the app's mistake: Express's error path says so
    if (err instanceof BodyTooLargeError) {
      res.setHeader('Connection', 'close'); // what is left of the body is discarded, and the connection with it
      sendProblem(res, 'body-too-large');
      return;
    }
    // The client went away while sending it, or the stream failed: nothing is claimed, and a client still there
    // is told so.
    config.logger.warn(`idem-keys-express: the body of ${req.method} ${target} could not be read: ${err.message}`);
    if (!clientGone(req)) sendProblem(res, 'body-unreadable');
    return;
  }
  const request = { method: req.method, target, body, json: isJsonBody(req, body) };

  const claimed = await claimKey(config, req, res, scope, key, request);
  if (!claimed) return;
  const attempt = new Attempt(config, res, claimed);
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

// Claims the key: { scope, key, outcome, token, transaction } when the handler is to run (claimed or recovered),
// else answers the request itself (a replay, 409, 422, 503) and gives null.
async function claimKey(config, req, res, scope, key, request) {
  // Transactional mode: the claim opens the request's transaction, on a client that stays with the request.
  const transactional = config.transactional(req);
  let transaction = null;
  let row;
  try {
    if (transactional) transaction = await beginTransaction(config.pool);
    row = await claim(transaction ?? config.pool, scope, key, request, config, transactional);
  } catch (err) { // no connection, BEGIN failed (the client is given back), or the claim failed
    config.logger.error(`idem-keys-express: idem_claim ${JSON.stringify(key)}: ${err.message}`, err);
    if (transaction) await rollbackQuietly(transaction, config.logger, key);
    sendProblem(res, 'store-unavailable');
    return null;
  }

  const outcome = row && row.outcome;
  // Anything but a claim wrote nothing: the transaction ends here, the handler does not run.
  if (transaction && outcome !== 'claimed' && outcome !== 'recovered') {
    await rollbackQuietly(transaction, config.logger, key);
  }
  const outcomeHeader = config.outcomeHeader ? [[config.outcomeHeader, outcome]] : [];
  switch (outcome) {
    case 'claimed':
    case 'recovered':
      for (const [name, value] of outcomeHeader) res.setHeader(name, value);
      return { scope, key, outcome, token: row.token, transaction };
    case 'replay':
      sendReplay(res, row, [...outcomeHeader, ['Idempotent-Replayed', 'true']]);
      return null;
    case 'in_progress':
      sendProblem(res, 'request-in-progress', outcomeHeader, row.retry_after);
      return null;
    case 'mismatch':
      sendProblem(res, 'key-reused', outcomeHeader);
      return null;
    default:
      config.logger.error(`idem-keys-express: idem_claim ${JSON.stringify(key)}: unexpected outcome ${outcome}`);
      sendProblem(res, 'store-unavailable');
      return null;
  }
}

// Whether the request's connection can no longer carry an answer: as on-finished (and so body-parser) sees it.
function clientGone(req) {
  const { socket } = req;
  return !socket || socket.destroyed || !socket.readable;
}

module.exports = { idempotency, releaseOnError };
