-- Routing on scope or on (scope, key): where 100 000 keys land on 4 partitions when half of them belong to
-- one large scope and the rest to 999 small ones (docs/scale-out.md). Runs on any PostgreSQL:
--   psql -X -f bench/routing.sql
-- The expressions are idem_keys_proxy.route (scope and key) and plain hashtext(scope), each & 3, as PL/Proxy
-- keeps the low bits.
WITH keys AS (
    SELECT CASE WHEN g % 2 = 0 THEN 'big-merchant' ELSE 'shop-' || (g % 999) END AS scope, 'k' || g AS key
      FROM generate_series(1, 100000) AS g
), placed AS (
    SELECT (hashtext(scope)::bigint & 3) AS by_scope,
           (hashtext(length(scope)::text || ':' || scope || key)::bigint & 3) AS by_scope_and_key
      FROM keys
)
SELECT p AS partition,
       (SELECT count(*) FROM placed WHERE by_scope = p) AS keys_routed_by_scope,
       (SELECT count(*) FROM placed WHERE by_scope_and_key = p) AS keys_routed_by_scope_and_key
  FROM generate_series(0, 3) AS p
 ORDER BY p;
