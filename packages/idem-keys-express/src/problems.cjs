// The answers the middleware makes itself: application/problem+json (RFC 9457), with the fields in the order
// every idem_keys middleware uses, so clients and the shared HTTP suite see the same bytes in every language
// (contract/problems.json).
'use strict';

const CONTENT_TYPE = 'application/problem+json';

// RFC 9110's reason phrases. Not http.STATUS_CODES: Node still says "Unprocessable Entity" for 422.
const TITLES = {
  400: 'Bad Request',
  409: 'Conflict',
  413: 'Content Too Large',
  422: 'Unprocessable Content',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

// code: [status, detail, Retry-After]. Retry-After is null for none, seconds, or 'lease': the claim's own.
const PROBLEMS = {
  'key-missing': [400, 'this request needs an Idempotency-Key header', null],
  'key-malformed': [400, 'the Idempotency-Key must be one field of 1 to 255 characters, bare or as a quoted string', null],
  'body-unreadable': [400, 'the request body could not be read', null],
  'body-too-large': [413, 'the request body is larger than this server accepts; nothing was claimed', null],
  'request-in-progress': [409, 'a request with this Idempotency-Key is still running: retry after Retry-After seconds', 'lease'],
  'lease-lost': [409, 'this request ran past its claim and another request took the key over: retry to get that one\'s answer', 1],
  'key-reused': [422, 'this Idempotency-Key was used with another request', null],
  'scope-missing': [500, 'the server could not tell whose request this is', null],
  'store-failed': [500, 'the answer could not be stored: retry later with the same Idempotency-Key', null],
  'store-unavailable': [503, 'the idempotency store could not be reached: nothing was done', 1],
  'commit-failed': [503, 'the request\'s changes could not be committed: nothing was done, retry with the same Idempotency-Key', 1],
  'commit-unknown': [503, 'the request\'s changes may or may not have been committed: retry with the same Idempotency-Key to learn which', 1],
};

// The problem named by code: { status, headers: [[name, value]], body }, body the exact bytes sent. leaseSeconds
// is what a problem whose Retry-After is the claim's own tells the client to wait (at least 1).
function problem(code, leaseSeconds) {
  const [status, detail, retryAfter] = PROBLEMS[code];
  const body = Buffer.from(JSON.stringify({ type: 'about:blank', title: TITLES[status], status, detail, code }));
  const headers = [];
  if (retryAfter === 'lease') headers.push(['Retry-After', String(Math.max(1, Math.ceil(Number(leaseSeconds) || 0)))]);
  else if (retryAfter !== null) headers.push(['Retry-After', String(retryAfter)]);
  headers.push(['Content-Type', CONTENT_TYPE]);
  return { status, headers, body };
}

module.exports = { PROBLEMS, problem };
