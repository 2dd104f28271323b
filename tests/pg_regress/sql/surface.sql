-- The SQL surface: every member object, its comment, and who may execute it.
SELECT pg_describe_object(classid, objid, 0) AS object,
       obj_description(objid, classid::regclass::text) IS NOT NULL AS commented
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idem_keys')
 ORDER BY 1;
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proparallel AS parallel,
       p.prosecdef AS security_definer, p.proconfig AS settings,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\_%'
 ORDER BY 1::text;
SELECT relname, relacl FROM pg_class WHERE relname IN ('idem_keys', 'idem_keys_token_seq') ORDER BY 1;
SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'idem_keys'::regclass ORDER BY 1;
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'idem_keys';
-- settings exist once the library is loaded (any call, or shared_preload_libraries)
SELECT idem_fingerprint('\x'::bytea) IS NOT NULL AS loaded;
SELECT name, setting, unit, context, min_val, max_val FROM pg_settings WHERE name LIKE 'idem\_keys.%' ORDER BY 1;
