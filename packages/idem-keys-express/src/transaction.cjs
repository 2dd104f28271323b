// Transactional mode: one request's transaction on a client of the pool, from BEGIN to its one COMMIT or ROLLBACK.
// The client goes back to the pool once, when the transaction has ended, and is destroyed instead whenever its
// connection is in doubt: its session ended under it (node-postgres then emits 'error' on the client, which would
// crash the process with nobody listening while the client is out of the pool), a COMMIT's answer never came, or
// ROLLBACK failed. A restarted or failed-over server thus leaves no dead client in the pool.
//
// The handler gets a guarded view of the client (handlerClient), which stops working once the handler has answered:
// after that the client commits, rolls back, and goes back to the pool, where a late query would run in another
// request's transaction, or commit on its own.
'use strict';

// The error of a query on req.idempotency.client after the handler answered (or failed).
class TransactionEndedError extends Error {
  constructor() {
    super('idem-keys-express: req.idempotency.client was used after the handler answered (or failed): the '
      + 'middleware ends the request\'s transaction then, and the client goes back to the pool');
    this.name = 'TransactionEndedError';
    this.code = 'IDEM_KEYS_TRANSACTION_ENDED';
  }
}

// SQLSTATEs of a session the server ended: admin_shutdown, crash_shutdown, cannot_connect_now. Like class 08
// (connection exceptions), they may come after the commit was made durable, so they prove nothing.
const SESSION_ENDED = new Set(['57P01', '57P02', '57P03']);

// Whether a COMMIT's error proves that nothing was committed: an error answer of the server (it carries a severity
// and a SQLSTATE), but not one that ended the session, nor a PANIC: a failure inside the commit's critical section
// (a WAL flush that failed), where the commit may be durable already. pg gives only the localized severity, so a
// server whose lc_messages translates PANIC is not caught here. An error without a SQLSTATE (the connection lost or
// closed, a client-side timeout) means the answer never came.
function commitRolledBack(err) {
  const code = err?.code;
  return typeof err?.severity === 'string' && err.severity !== 'PANIC'
    && typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !code.startsWith('08') && !SESSION_ENDED.has(code);
}

// A client of the pool with a transaction open on it (the pool's default isolation). A failed BEGIN gives the
// client back, destroyed, before the error goes on.
async function beginTransaction(pool) {
  const transaction = new Transaction(await pool.connect());
  try {
    await transaction.query('BEGIN');
  } catch (err) {
    transaction.giveBack(err);
    throw err;
  }
  return transaction;
}

// Rolls back, for a request whose transaction ends without its answer. A failed ROLLBACK is only logged: rollback()
// has destroyed the client then, and PostgreSQL ends the transaction with the connection.
async function rollbackQuietly(transaction, logger, key) {
  try {
    await transaction.rollback();
  } catch (err) {
    logger.warn(`idem-keys-express: ROLLBACK for ${JSON.stringify(key)}: ${err.message}`, err);
  }
}

class Transaction {
  constructor(client) {
    this.client = client;
    this.lost = null; // the error with which the client's connection ended, if it did
    this.handlerMayUse = true;
    this.given = false;
    this.onLost = (err) => {
      this.lost ??= err;
    };
    client.on?.('error', this.onLost); // `on` is optional: a pool may hand out plain { query, release } clients
    this.handlerClient = guarded(client, this);
  }

  // The middleware's own statements.
  query(text, values) {
    return this.client.query(text, values);
  }

  // From now on the handler's view refuses every query.
  revoke() {
    this.handlerMayUse = false;
  }

  // Commits and gives the client back. 'committed'; 'rolled-back' when nothing was committed: the COMMIT's error
  // proves it, or the transaction had failed already (PostgreSQL answers COMMIT with ROLLBACK then); 'lost' when
  // the connection was lost before the COMMIT could be sent, so the server rolled the transaction back with the
  // session, and the client is destroyed; 'unknown' when the COMMIT's answer never came, and the client is
  // destroyed. error is what to log.
  async commit() {
    this.revoke();
    if (this.lost) {
      this.giveBack();
      return { outcome: 'lost', error: this.lost };
    }
    let result;
    try {
      result = await this.client.query('COMMIT');
    } catch (err) {
      if (!commitRolledBack(err)) {
        this.giveBack(err);
        return { outcome: 'unknown', error: err };
      }
      await this.rollback().catch(() => {}); // the session is idle again: ROLLBACK only makes sure
      return { outcome: 'rolled-back', error: err };
    }
    this.giveBack();
    if (result.command !== 'COMMIT') {
      return { outcome: 'rolled-back',
        error: new Error(`the transaction had failed, so COMMIT rolled it back (${result.command})`) };
    }
    return { outcome: 'committed' };
  }

  // Rolls back and gives the client back; a client whose ROLLBACK failed is destroyed, never pooled with a
  // transaction open (PostgreSQL ends the transaction with the connection). Rejects with the ROLLBACK's error then.
  async rollback() {
    this.revoke();
    try {
      await this.client.query('ROLLBACK');
    } catch (err) {
      this.giveBack(err);
      throw err;
    }
    this.giveBack();
  }

  // Back to the pool, once; with an error, or once the connection was lost, pg destroys the client instead.
  giveBack(err) {
    if (this.given) return;
    this.given = true;
    this.revoke();
    this.client.release(err ?? this.lost ?? undefined);
    // After release(): the pool listens for 'error' again from then on, so there is no moment without a listener.
    this.client.removeListener?.('error', this.onLost);
  }
}

// The client as the handler sees it: all of it, but query() refuses once the transaction is no longer the
// handler's, in each of pg's forms (a promise, a callback, a submittable such as a cursor), and release() always
// throws: the transaction is the middleware's to end.
function guarded(client, transaction) {
  function query(...args) {
    if (transaction.handlerMayUse) return client.query(...args);
    const err = new TransactionEndedError();
    const [config] = args;
    if (config && typeof config.submit === 'function') { // as pg itself refuses a submittable
      process.nextTick(() => config.handleError(err, client.connection));
      return config;
    }
    const callback = args.at(-1);
    if (typeof callback === 'function') {
      process.nextTick(callback, err);
      return undefined;
    }
    return Promise.reject(err);
  }
  function release() {
    throw new Error('idem-keys-express: the middleware releases req.idempotency.client, after the handler answered; '
      + 'the handler must not');
  }
  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') return query;
      if (property === 'release') return release;
      const value = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

module.exports = { TransactionEndedError, commitRolledBack, beginTransaction, rollbackQuietly };
