-- The SQL surface: every member object, its comment, and who may execute it. The same on every major:
-- PostgreSQL 17+ also records the implicit types (a table's row type, every array type) as members, and
-- those are left out here; 17+ also has a MAINTAIN privilege, which is not ours to show.
SELECT pg_describe_object(classid, objid, 0) AS object,
       obj_description(objid, classid::regclass::text) IS NOT NULL AS commented
  FROM pg_depend d
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idem_keys')
   AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
                    WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                      AND (t.typcategory = 'A' OR c.relkind = 'r'))
 ORDER BY 1;
SELECT p.oid::regprocedure AS function, p.provolatile AS volatility, p.proparallel AS parallel,
       p.prosecdef AS security_definer, p.proconfig AS settings,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\_%'
 ORDER BY 1::text;
SELECT c.relname, a.grantee::regrole AS grantee, string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) AS privileges
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relname IN ('idem_keys', 'idem_keys_token_seq') AND a.privilege_type <> 'MAINTAIN'
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'idem_keys'::regclass ORDER BY 1;
-- The table's columns: types, NOT NULLs and collations (scope and key compare as bytes).
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, c.collname
  FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation
 WHERE a.attrelid = 'idem_keys'::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'idem_keys';
-- settings exist once the library is loaded (any call, or shared_preload_libraries)
SELECT idem_fingerprint('\x'::bytea) IS NOT NULL AS loaded;
SELECT name, setting, unit, context, min_val, max_val FROM pg_settings WHERE name LIKE 'idem\_keys.%' ORDER BY 1;
