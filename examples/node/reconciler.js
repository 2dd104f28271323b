// Settles every key whose owner died without finishing, for clients that never come back. idem-keys-express
// handles the requests; this loop is plain SQL (idem_stale, idem_finish, idem_release), bind parameters only.
import { lookupCharge, paymentAnswer } from './provider.js';

// If the provider holds a charge under the key, finish it with the answer the owner would have given; if not,
// nothing was charged, so release it for the client's retry. Both use the dead owner's token, so a retry that
// recovers the key meanwhile wins and our finish is refused (55000), which is fine. Releasing is safe even if the
// "dead" owner was only slow and charges after we looked: its finish is then refused (409 lease-lost), its
// client retries, and the provider, idempotent by reference, returns that same charge.
export async function reconcile(pool, scope) {
  let finished = 0;
  let released = 0;
  // idem_stale is revoked from PUBLIC: the service's role needs EXECUTE on it (examples/README.md).
  const { rows } = await pool.query('SELECT key, token FROM idem_stale() WHERE scope = $1', [scope]);
  for (const { key, token } of rows) { // token: a bigint, which pg hands over as a string
    try {
      const charge = await lookupCharge(key);
      if (!charge) {
        const { rows: [{ released: ok }] } = await pool.query('SELECT idem_release($1, $2, $3) AS released',
          [scope, key, token]);
        if (ok) released += 1;
        continue;
      }
      const { status, headers, body } = paymentAnswer(charge);
      // The bytes, as the middleware stores them: a replay repeats them exactly.
      await pool.query('SELECT idem_finish($1, $2, $3, $4, $5::bytea, headers => $6::jsonb)',
        [scope, key, token, status, Buffer.from(body), JSON.stringify(headers)]);
      finished += 1;
    } catch (err) { // one bad key must not stop the pass; the next pass retries it
      console.warn(`reconcile ${JSON.stringify(key)}: ${err.message}`);
    }
  }
  return { finished, released };
}

// Runs reconcile() every `seconds`, in the background (the timer does not keep the process alive).
export function startReconciler(pool, scope, seconds) {
  setInterval(async () => {
    const { finished, released } = await reconcile(pool, scope).catch((err) => {
      console.warn(`reconcile: ${err.message}`);
      return {};
    });
    if (finished || released) console.log(`reconcile: ${finished} finished, ${released} released`);
  }, seconds * 1000).unref();
}
