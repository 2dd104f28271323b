// The fake provider's HTTP API (examples/provider). The idempotency key is our reference there, so a charge can
// always be found again: by a retry that recovers the key, or by the reconciler.
const PROVIDER_URL = process.env.PROVIDER_URL || 'http://127.0.0.1:8090';

// { status, charge }; charge only on 200/201.
export async function provider(method, path, payload) {
  const res = await fetch(PROVIDER_URL + path, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: payload && JSON.stringify(payload),
    signal: AbortSignal.timeout(10_000),
  });
  const body = await res.json();
  return { status: res.status, charge: res.ok ? body : null };
}

// The charge made under reference, or null.
export async function lookupCharge(reference) {
  const { status, charge } = await provider('GET', `/charges?${new URLSearchParams({ reference })}`);
  if (status !== 200 && status !== 404) throw new Error(`provider lookup: status ${status}`);
  return charge;
}

// The answer to a successful payment, built from the provider's charge alone, so that the reconciler, which
// never saw the request, stores exactly the bytes and headers the handler would have sent.
export function paymentAnswer(charge) {
  const { id, amount, currency, customer_id } = charge;
  return {
    status: 201,
    headers: { 'Content-Type': 'application/json; charset=utf-8', Location: `/payments/${id}` },
    body: JSON.stringify({ charge_id: id, amount, currency, customer_id, status: 'succeeded' }),
  };
}
