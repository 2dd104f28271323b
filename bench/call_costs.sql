-- What a claim and a finish cost inside one backend, with no round trip: 10,000 calls each in one transaction
-- block (so the claim is the write-once claim), against the sample app's INSERT. Run with psql's \timing:
--   psql -X -f bench/call_costs.sql   (on a throwaway database with the extension)
\timing on
CREATE TABLE IF NOT EXISTS call_costs_payments (id bigserial PRIMARY KEY, tenant text NOT NULL,
  idempotency_key text, amount bigint NOT NULL, currency text NOT NULL, customer_id text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE EXTENSION IF NOT EXISTS idem_keys;
BEGIN;
DO $$ BEGIN FOR i IN 1..10000 LOOP
  INSERT INTO call_costs_payments (tenant, idempotency_key, amount, currency, customer_id)
  VALUES ('bench', 'insert-' || i, 1000, 'EUR', 'cus_bench');
END LOOP; END $$;
DO $$ DECLARE r idem_result; BEGIN FOR i IN 1..10000 LOOP
  r := idem_claim('call-costs', 'claim-' || i || '-' || txid_current(), '{"amount": 1000, "currency": "EUR", "customer_id": "cus_bench"}'::jsonb);
END LOOP; END $$;
DO $$ DECLARE r idem_result; k text; BEGIN FOR i IN 1..10000 LOOP
  k := 'pair-' || i || '-' || txid_current();
  r := idem_claim('call-costs', k, '{"amount": 1000, "currency": "EUR", "customer_id": "cus_bench"}'::jsonb);
  PERFORM idem_finish('call-costs', k, r.token, 201, '{"id": 1, "tenant": "bench", "amount": 1000, "currency": "EUR", "customer_id": "cus_bench", "attempt": "claimed"}'::jsonb, headers => '{"Location": "/payments/1"}'::jsonb);
END LOOP; END $$;
ROLLBACK;
