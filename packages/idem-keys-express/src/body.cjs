// The request body: the middleware reads it whole to fingerprint it, then hands it to whatever runs next
// (express.json(), multer, a handler reading the stream) as if it had never been touched.
'use strict';
const { Readable } = require('node:stream');

class BodyConsumedError extends Error {
  constructor() {
    super('idem-keys-express: the request body was already read before idempotency() ran, so it cannot be '
      + 'fingerprinted: mount idempotency() before express.json() and any other body parser');
    this.name = 'BodyConsumedError';
  }
}

class BodyTooLargeError extends Error {
  constructor(maxBodyBytes) {
    super(`idem-keys-express: the request body is larger than ${maxBodyBytes} bytes (maxBodyBytes)`);
    this.name = 'BodyTooLargeError';
  }
}

// Something already read the stream, or is reading it: a body parser mounted before us (body-parser 1 marks
// req._body), or a 'data' listener. Fingerprinting what is left would bind the key to nothing.
function consumed(req) {
  return req._body === true || req.readableDidRead || req.readableEnded || req.readableFlowing !== null;
}

// Reads the whole body into one Buffer, at most maxBodyBytes bytes. Rejects with BodyConsumedError,
// BodyTooLargeError, or the stream's own error (an abort: ECONNRESET) when it cannot be read.
function readBody(req, maxBodyBytes) {
  if (consumed(req)) return Promise.reject(new BodyConsumedError());
  if (Number(req.headers['content-length']) > maxBodyBytes) { // too large by its Content-Length: discarded unread
    req.resume();
    return Promise.reject(new BodyTooLargeError(maxBodyBytes));
  }
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    let ended = false;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    function onData(chunk) {
      size += chunk.length;
      if (size > maxBodyBytes) { // too large by counting (no Content-Length): the rest is discarded
        cleanup();
        req.resume();
        reject(new BodyTooLargeError(maxBodyBytes));
        return;
      }
      chunks.push(chunk);
    }
    function onEnd() {
      ended = true;
    }
    function onError(err) {
      cleanup();
      reject(err);
    }
    // Resolved on 'close', which follows 'end' once the stream has destroyed itself: replaying the body before
    // that would let the pending destroy mark the replayed stream destroyed too.
    function onClose() {
      cleanup();
      if (ended) resolve(Buffer.concat(chunks, size));
      else reject(Object.assign(new Error('idem-keys-express: the client aborted the request'), { code: 'ECONNRESET' }));
    }
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}

// Makes req readable again, from the start, with the body that was read: a fresh readable state on the same
// object (its listeners and properties stay), holding the body and the end of the stream. Later readers see an
// ordinary unread request: body-parser checks req.readable and on-finished, multer pipes it, and so on.
function replayBody(req, body) {
  Readable.call(req);
  if (body.length) req.push(body);
  req.push(null);
}

// application/json and application/*+json (application/merge-patch+json, ...), parameters ignored.
const JSON_TYPE = /^application\/(?:[!#$%&'*.^_`|~0-9a-z-]+\+)?json$/;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// Whether the body is fingerprinted as JSON (its canonical jsonb) rather than by its bytes: a JSON media type,
// not compressed, not empty, without a NUL byte (no PostgreSQL text holds one) and valid UTF-8 (anything else
// would reach the server altered by decoding). Every middleware applies the same test (docs/integrations.md,
// "The fingerprint").
function isJsonBody(req, body) {
  const type = (req.headers['content-type'] || '').split(';')[0].trim().toLowerCase();
  const encoding = (req.headers['content-encoding'] || 'identity').trim().toLowerCase();
  if (!JSON_TYPE.test(type) || encoding !== 'identity') return false;
  if (body.length === 0 || body.includes(0)) return false;
  try {
    utf8.decode(body);
    return true;
  } catch {
    return false;
  }
}

module.exports = { BodyConsumedError, BodyTooLargeError, readBody, replayBody, isJsonBody };
