-- idem_keys on Citus: distributes the keys table by scope and delegates every keyed verb to the worker that
-- holds its scope's shard, so a claim or a finish is one hop from the coordinator. For both editions.
--
-- Run on the coordinator, as a superuser, in the database where idem_keys (the extension, or the portable
-- edition in the current schema) is installed, once the workers are added:
--     psql -v ON_ERROR_STOP=1 -d DB -f idem_keys_distribute.sql
-- Run it again after adding a worker: it is idempotent, and gives the new worker's token sequence a range of
-- its own. docs/scale-out.md says what is delegated and why.
DO $distribute$
DECLARE
    home name;          -- the schema idem_keys lives in
    keys regclass;
    verb regprocedure;
    failed text;        -- what the workers said, when one could not drop its own table
BEGIN
    SELECT e.extnamespace::regnamespace::name INTO home FROM pg_catalog.pg_extension AS e WHERE e.extname = 'idem_keys';
    IF home IS NULL THEN
        -- The portable edition lives in the schema it was installed into, which is on this search_path.
        SELECT c.relnamespace::regnamespace::name INTO home
          FROM pg_catalog.pg_class AS c
         WHERE c.oid = pg_catalog.to_regclass('idem_keys_settings');
    END IF;
    IF home IS NULL THEN
        RAISE EXCEPTION 'idem_keys is not installed in this database'
              USING ERRCODE = '42704',
                    HINT = 'CREATE EXTENSION idem_keys, or install the portable edition, then run this script again.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'Citus is not installed in this database'
              USING ERRCODE = '55000', HINT = 'Run this script on the Citus coordinator, after CREATE EXTENSION citus.';
    END IF;
    keys := pg_catalog.format('%I.idem_keys', home)::regclass;
    -- Creating the shards and then distributing functions in one transaction needs one connection per node.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- Rows of one scope live on one shard, so every verb that names a scope runs where its rows are.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = keys) THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'idem_keys') THEN
            -- The portable edition was installed on every node (Citus does not carry plain SQL to the
            -- workers), each with a table of its own; Citus creates the distributed table's shell there
            -- instead. A worker's table with rows in it is not dropped: that is an error to look at.
            SELECT pg_catalog.string_agg(w.nodename || ':' || w.nodeport || ': ' || w.result, '; ')
              INTO failed
              FROM run_command_on_workers(pg_catalog.format(
                $cmd$DO $drop$ BEGIN
                    IF pg_catalog.to_regclass(%1$L) IS NOT NULL THEN
                        IF EXISTS (SELECT FROM %2$I.idem_keys) THEN
                            RAISE EXCEPTION 'this worker''s own idem_keys table has rows';
                        END IF;
                        DROP TABLE %2$I.idem_keys;
                    END IF;
                END $drop$$cmd$, pg_catalog.format('%I.idem_keys', home), home)) AS w
             WHERE NOT w.success;
            IF failed IS NOT NULL THEN
                RAISE EXCEPTION 'idem_keys could not be distributed: %', failed
                      USING ERRCODE = '55000',
                            HINT = 'A worker''s own idem_keys table has rows: move or delete them, then run this script again.';
            END IF;
        END IF;
        PERFORM create_distributed_table(keys, 'scope', colocate_with => 'none');
    END IF;

    -- The keyed verbs (every overload): a call runs on the worker that holds the scope's shard. The
    -- extension's hot path sees a distributed table there and takes its SQL statements, which Citus runs on
    -- the shard (docs/scale-out.md).
    FOR verb IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = home::regnamespace
           AND p.proname IN ('idem_claim', 'idem_finish', 'idem_release', 'idem_checkpoint', 'idem_lookup')
           AND p.proargnames[1] = 'scope'
    LOOP
        PERFORM create_distributed_function(verb, distribution_arg_name => 'scope', colocate_with => keys::text);
    END LOOP;

    -- Fencing tokens come from each node's own idem_keys_token_seq. A shard that moves to another worker keeps
    -- its rows, so two workers must never hand out the same token: each node's sequence starts in a range of
    -- its own, 2^48 tokens wide, named by its group id (a takeover after a move gets a token the old holder's
    -- can never equal).
    SELECT pg_catalog.string_agg('node ' || n.nodeid || ': ' || n.result, '; ')
      INTO failed
      FROM run_command_on_all_nodes(pg_catalog.format(
        $$SELECT pg_catalog.setval(%L, greatest(
              (SELECT last_value FROM %I.idem_keys_token_seq),
              (SELECT groupid::bigint << 48 FROM pg_catalog.pg_dist_local_group)) + 1, false)$$,
        pg_catalog.format('%I.idem_keys_token_seq', home), home)) AS n
     WHERE NOT n.success;
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'a node''s token range could not be set: %', failed
              USING ERRCODE = '55000', HINT = 'Install idem_keys on every node, then run this script again.';
    END IF;
END
$distribute$;
