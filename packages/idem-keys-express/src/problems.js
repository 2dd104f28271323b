// The answers the middleware makes itself: application/problem+json (RFC 9457), with the fields in the order
// every idem_keys middleware uses, so clients and the shared HTTP suite see the same bytes in every language.

// RFC 9110's reason phrases. Not http.STATUS_CODES: Node still says "Unprocessable Entity" for 422.
const TITLES = {
  400: 'Bad Request',
  409: 'Conflict',
  413: 'Content Too Large',
  422: 'Unprocessable Content',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export const PROBLEMS = {
  'key-missing': [400, 'this request needs an Idempotency-Key header'],
  'key-malformed': [400, 'the Idempotency-Key must be one field of 1 to 255 characters, bare or as a quoted string'],
  'body-too-large': [413, 'the request body is larger than this server accepts; nothing was claimed'],
  'request-in-progress': [409, 'a request with this Idempotency-Key is still running: retry after Retry-After seconds'],
  'lease-lost': [409, 'this request ran past its claim and another request took the key over: retry to get that one\'s answer'],
  'key-reused': [422, 'this Idempotency-Key was used with another request'],
  'scope-missing': [500, 'the server could not tell whose request this is'],
  'store-failed': [500, 'the answer could not be stored: retry later with the same Idempotency-Key'],
  'store-unavailable': [503, 'the idempotency store could not be reached: nothing was done'],
  'commit-failed': [503, 'the request\'s changes could not be committed: nothing was done, retry with the same Idempotency-Key'],
  'commit-unknown': [503, 'the request\'s changes may or may not have been committed: retry with the same Idempotency-Key to learn which'],
};

// { status, body } of the problem named by code; body is the exact bytes sent.
export function problem(code) {
  const [status, detail] = PROBLEMS[code];
  const body = JSON.stringify({ type: 'about:blank', title: TITLES[status], status, detail, code });
  return { status, body: Buffer.from(body) };
}
