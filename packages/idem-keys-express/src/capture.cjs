// Holds the handler's answer in memory until the middleware has stored it, so a client never sees an answer a
// retry could not replay. writeHead, write and end are shadowed on the response object itself; Express's
// res.json, res.send, res.redirect and res.sendFile all end in them, and so does a stream piped into res.
//
// States: 'capturing' (the handler is answering: everything is held), 'held' (the handler ended: its answer is
// being stored; anything it writes after that is dropped), 'through' (the held answer is being sent, or the
// handler failed and Express's error path answers: everything goes straight to the real methods).
'use strict';

function captureResponse(res, onAnswer) {
  // Whatever is there now: the prototype's methods, or the wrappers of middleware mounted before ours
  // (compression, on-headers hooks), which then see the answer on its way out, after it was stored.
  const real = { writeHead: res.writeHead, write: res.write, end: res.end, flushHeaders: res.flushHeaders };
  // What middleware mounted before ours had set (CORS, cookies): kept on the answers the middleware makes itself.
  const initialHeaders = headerList(res);
  let state = 'capturing';
  const chunks = [];

  res.writeHead = function writeHead(status, reason, headers) {
    if (state === 'through') return real.writeHead.apply(this, arguments);
    if (typeof reason !== 'string') {
      headers = reason;
      reason = undefined;
    }
    if (state === 'capturing') {
      this.statusCode = status;
      if (reason !== undefined) this.statusMessage = reason;
      if (headers) setHeaders(this, headers);
    }
    return this;
  };

  res.write = function write(chunk, encoding, callback) {
    if (state === 'through') return real.write.apply(this, arguments);
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (state === 'capturing' && chunk != null) chunks.push(toBuffer(chunk, encoding));
    if (callback) process.nextTick(callback);
    return true; // held in memory: no back-pressure to apply
  };

  res.end = function end(chunk, encoding, callback) {
    if (state === 'through') return real.end.apply(this, arguments);
    if (typeof chunk === 'function') {
      callback = chunk;
      chunk = undefined;
    } else if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (state !== 'capturing') return this; // a second end: the first answer stands
    if (chunk != null) chunks.push(toBuffer(chunk, encoding));
    if (callback) this.once('finish', callback);
    state = 'held';
    onAnswer(snapshot(this, Buffer.concat(chunks)));
    return this;
  };

  // Nothing may reach the client before the answer is stored.
  res.flushHeaders = function flushHeaders() {
    if (state === 'through') return real.flushHeaders.apply(this, arguments);
    return undefined;
  };

  return {
    initialHeaders,
    get state() {
      return state;
    },
    // The handler failed before answering: Express's error path answers, straight to the client.
    passThrough() {
      state = 'through';
    },
    // Sends an answer ({ status, statusMessage, headers: [[name, value]], body }) with exactly these headers.
    send(answer) {
      state = 'through';
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      for (const [name, value] of answer.headers) res.setHeader(name, value);
      res.statusCode = answer.status;
      // Always set, undefined too (Node then uses the status's own phrase): Express's error path may have put its
      // own there meanwhile, when the handler failed after it answered.
      res.statusMessage = answer.statusMessage;
      // Node's end writes the head through res.writeHead, so a head hook (on-headers) of middleware mounted
      // after ours still runs; our writeHead passes through by now.
      real.end.call(res, answer.body);
    },
  };
}

// The handler's answer as it stood when it ended: status, headers with the names as it spelled them, body.
function snapshot(res, body) {
  return { status: res.statusCode, statusMessage: res.statusMessage, headers: headerList(res), body };
}

function headerList(res) {
  return res.getRawHeaderNames().map((name) => [name, res.getHeader(name)]);
}

// writeHead(status, headers) takes an object, an array of [name, value] pairs or a flat [name, value, ...]
// list, as node:http does; the values land in the response's headers like setHeader's.
function setHeaders(res, headers) {
  if (!Array.isArray(headers)) {
    for (const name of Object.keys(headers)) {
      if (headers[name] !== undefined) res.setHeader(name, headers[name]);
    }
  } else if (Array.isArray(headers[0])) {
    for (const [name, value] of headers) res.appendHeader(name, value);
  } else {
    for (let i = 0; i + 1 < headers.length; i += 2) res.appendHeader(headers[i], headers[i + 1]);
  }
}

function toBuffer(chunk, encoding) {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding || 'utf8');
  return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength); // a Uint8Array
}

module.exports = { captureResponse };
