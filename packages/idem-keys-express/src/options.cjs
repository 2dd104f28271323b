// idempotency()'s options, checked once when the middleware is made: a typo must fail at start-up, not turn
// into a default on every request. The names are the vocabulary every idem_keys middleware shares
// (docs/integrations.md, "Options"), in JavaScript's case, plus pool.
'use strict';

const DEFAULT_STORED_HEADERS = ['Content-Type', 'Content-Language', 'Content-Location', 'Location', 'ETag', 'Link'];

const OPTION_NAMES = ['pool', 'scope', 'lease', 'wait', 'retention', 'methods', 'required', 'retryableStatuses',
  'storedHeaders', 'outcomeHeader', 'maxBodyBytes', 'transactional', 'logger'];

// Names of earlier releases, refused with the one that replaced them rather than as unknown.
const RENAMED = { limit: 'maxBodyBytes' };

function resolveOptions(options) {
  if (options === null || typeof options !== 'object') {
    throw new TypeError('idempotency(options): options must be an object with at least pool and scope');
  }
  for (const name of Object.keys(options)) {
    if (Object.hasOwn(RENAMED, name)) {
      throw new TypeError(`idempotency(): the option ${name} is now called ${RENAMED[name]}`);
    }
    if (!OPTION_NAMES.includes(name)) throw new TypeError(`idempotency(): unknown option ${JSON.stringify(name)}`);
  }
  const { pool, scope } = options;
  if (!pool || typeof pool.query !== 'function') {
    throw new TypeError('idempotency(): pool is required: a pg.Pool (anything with pool.query(text, values))');
  }
  // No default scope: one would put every tenant's keys in one scope, and a client could replay another
  // tenant's answer by guessing its key.
  if (typeof scope !== 'function') {
    throw new TypeError('idempotency(): scope is required: a function (req) => string naming whose request it is, '
      + 'from its authentication (e.g. req => req.user.tenantId)');
  }
  return {
    pool,
    scope,
    transactional: transactionalOption(options.transactional, pool),
    lease: seconds('lease', options.lease, { zero: false }),
    wait: seconds('wait', options.wait, { zero: true }),
    retention: seconds('retention', options.retention, { zero: false }),
    methods: new Set(stringList('methods', options.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase())),
    required: boolean('required', options.required ?? true),
    retryableStatuses: new Set(statusList(options.retryableStatuses ?? [429, 503])),
    // lower-case names: header names are case-insensitive
    storedHeaders: new Set(stringList('storedHeaders', options.storedHeaders ?? DEFAULT_STORED_HEADERS)
      .map((name) => name.toLowerCase())),
    outcomeHeader: optionalString('outcomeHeader', options.outcomeHeader),
    logger: logger(options.logger),
    maxBodyBytes: maxBodyBytes(options.maxBodyBytes),
  };
}

// Transactional mode: true, false or a function (req) => boolean choosing the requests; always a function here.
// The mode takes a client of its own from the pool for each request, hence pool.connect().
function transactionalOption(value, pool) {
  if (value === undefined || value === false) return () => false;
  if (value !== true && typeof value !== 'function') {
    throw new TypeError('idempotency(): transactional must be true, false or a function (req) => boolean');
  }
  if (typeof pool.connect !== 'function') {
    throw new TypeError('idempotency(): transactional needs a pool with connect() (a pg.Pool): each request runs '
      + 'in a transaction on a client of its own');
  }
  return value === true ? () => true : value;
}

// A duration in seconds, as every idem_keys middleware takes it; null or undefined leaves it to the server (its
// idem_keys.lease / idem_keys.retention, or no wait). Text is refused by name: earlier releases took a PostgreSQL
// interval ('30s') or milliseconds, and a number meant for milliseconds would now be a thousand times too long.
function seconds(name, value, { zero }) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') {
    throw new TypeError(`idempotency(): ${name} is in seconds, a number (e.g. ${name}: 30), `
      + `not the text ${JSON.stringify(value)}`);
  }
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (value === 0 && !zero)) {
    throw new TypeError(`idempotency(): ${name} must be a number of seconds ${zero ? 'of 0 or more' : 'above 0'}, `
      + `got ${typeof value === 'number' ? value : typeof value}`);
  }
  return value;
}

function stringList(name, value) {
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string' && v !== '')) {
    throw new TypeError(`idempotency(): ${name} must be an array of strings`);
  }
  return value;
}

function statusList(value) {
  if (!Array.isArray(value) || !value.every((v) => Number.isInteger(v) && v >= 100 && v <= 599)) {
    throw new TypeError('idempotency(): retryableStatuses must be an array of HTTP status codes');
  }
  return value;
}

function boolean(name, value) {
  if (typeof value !== 'boolean') throw new TypeError(`idempotency(): ${name} must be true or false`);
  return value;
}

function optionalString(name, value) {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value === '') throw new TypeError(`idempotency(): ${name} must be a header name`);
  return value;
}

function logger(value) {
  if (value === undefined) return console;
  if (value && typeof value.warn === 'function' && typeof value.error === 'function') return value;
  throw new TypeError('idempotency(): logger must have warn() and error() (console, pino, winston, ...)');
}

// The largest request body read to fingerprint it, in bytes: the middleware holds it in memory before any
// body parser's own limit applies.
function maxBodyBytes(value) {
  if (value === undefined) return 1024 * 1024;
  if (value === Infinity || (Number.isInteger(value) && value >= 0)) return value;
  throw new TypeError('idempotency(): maxBodyBytes must be a number of bytes (or Infinity)');
}

module.exports = { DEFAULT_STORED_HEADERS, OPTION_NAMES, resolveOptions };
