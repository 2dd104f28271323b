// The answers the middleware sends in place of the handler's: its problems, and a stored answer replayed.
'use strict';
const { problem } = require('./problems.cjs');

// A problem straight to the client, before the handler ran. extra: headers of the middleware's own (the outcome
// header); leaseSeconds: the claim's Retry-After, for request-in-progress.
function sendProblem(res, code, extra = [], leaseSeconds = undefined) {
  const { status, headers, body } = problem(code, leaseSeconds);
  for (const [name, value] of [...extra, ...headers]) res.setHeader(name, value);
  res.statusCode = status;
  res.end(body);
}

// The stored answer: its status, its allow-listed headers and its bytes, plus extra (Idempotent-Replayed).
function sendReplay(res, row, extra) {
  for (const [name, value] of Object.entries(row.headers || {})) res.setHeader(name, value);
  for (const [name, value] of extra) res.setHeader(name, value);
  res.statusCode = row.status_code;
  res.end(row.response_bytes || undefined);
}

// A problem in place of the handler's held answer (capture.cjs): the headers set before the middleware ran (CORS,
// cookies) but their Content-*, and the problem's.
function problemAnswer(capture, code) {
  const { status, headers, body } = problem(code);
  const kept = capture.initialHeaders.filter(([name]) => !/^content-/i.test(name));
  return { status, headers: [...kept, ...headers], body };
}

module.exports = { sendProblem, sendReplay, problemAnswer };
