// idempotency()'s options, checked once when the middleware is made: a typo must fail at start-up, not turn
// into a default on every request.

export const DEFAULT_STORED_HEADERS = ['Content-Type', 'Content-Language', 'Content-Location', 'Location', 'ETag', 'Link'];

const KNOWN = new Set(['pool', 'scope', 'lease', 'wait', 'retention', 'methods', 'required', 'retryableStatuses',
  'storedHeaders', 'outcomeHeader', 'logger', 'limit', 'transactional']);

export function resolveOptions(options) {
  if (options === null || typeof options !== 'object') {
    throw new TypeError('idempotency(options): options must be an object with at least pool and scope');
  }
  for (const name of Object.keys(options)) {
    if (!KNOWN.has(name)) throw new TypeError(`idempotency(): unknown option ${JSON.stringify(name)}`);
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
  const transactional = transactionalOption(options.transactional, pool);
  return {
    pool,
    scope,
    transactional,
    lease: interval('lease', options.lease, 1),
    wait: interval('wait', options.wait, 0),
    retention: interval('retention', options.retention, 1),
    methods: new Set(stringList('methods', options.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase())),
    required: boolean('required', options.required ?? true),
    retryableStatuses: new Set(statusList(options.retryableStatuses ?? [429, 503])),
    // lower-case names: header names are case-insensitive
    storedHeaders: new Set(stringList('storedHeaders', options.storedHeaders ?? DEFAULT_STORED_HEADERS)
      .map((name) => name.toLowerCase())),
    outcomeHeader: optionalString('outcomeHeader', options.outcomeHeader),
    logger: logger(options.logger),
    limit: limit(options.limit),
  };
}

// Transactional mode: true, false, or a function (req) => boolean choosing the requests; always a function here.
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

// A duration for SQL: milliseconds as a number, or a PostgreSQL interval as text ('30s', '5 min'); null or
// undefined leaves it to the server (its idem_keys.lease / idem_keys.retention, or no wait).
function interval(name, value, minimum) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < minimum) {
      throw new TypeError(`idempotency(): ${name} must be at least ${minimum} ms, got ${value}`);
    }
    return `${value} milliseconds`;
  }
  if (typeof value === 'string' && value.trim() !== '') return value;
  throw new TypeError(`idempotency(): ${name} must be milliseconds (a number) or a PostgreSQL interval (a string)`);
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
function limit(value) {
  if (value === undefined) return 1024 * 1024;
  if (value === Infinity || (Number.isInteger(value) && value >= 0)) return value;
  throw new TypeError('idempotency(): limit must be a number of bytes (or Infinity)');
}
