-- CALL idem_sweep_paced(): the extension's procedure (sql/finalize.sql), which pg_cron calls. A procedure that
-- commits can have no SET clause and must be SECURITY INVOKER, so every name in it is schema-qualified: it is
-- made here, where the schema is known.
DO $$
BEGIN
    EXECUTE pg_catalog.format($procedure$
CREATE OR REPLACE PROCEDURE %1$I.idem_sweep_paced(
    batch_size integer DEFAULT NULL, delay interval DEFAULT NULL, INOUT removed bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $body$
DECLARE
    progress %1$I.idem_sweep_progress;
    pause double precision;
BEGIN
    IF delay < interval '0' THEN
        RAISE EXCEPTION 'idem_sweep_paced: delay must not be negative' USING ERRCODE = '22023',
            HINT = 'Pass NULL for idem_keys.sweep_delay, or an interval such as ''5 milliseconds''.';
    END IF;
    -- Read (and checked) before the first batch, so a bad idem_keys.sweep_delay deletes nothing.
    pause := pg_catalog.date_part('epoch',
        coalesce(delay, %1$I.idem_keys_setting('idem_keys.sweep_delay') * interval '1 millisecond'));
    LOOP
        progress := %1$I.idem_sweep_step(progress, batch_size);
        COMMIT;
        EXIT WHEN progress.done;
        IF pause > 0 THEN
            PERFORM pg_catalog.pg_sleep(pause);
        END IF;
    END LOOP;
    removed := progress.removed;
END
$body$
$procedure$, pg_catalog.current_schema());
END
$$;
