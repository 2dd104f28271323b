-- Every property of every member object of idem_keys, one sorted line each. Two databases print the same
-- lines exactly when their extensions are equal object by object (pg_dump cannot show this: it prints only
-- CREATE EXTENSION for members).
WITH members AS (
    SELECT d.classid, d.objid
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'idem_keys'
), member_rels AS (
    SELECT c.oid, c.relname FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
    UNION
    SELECT c.oid, c.relname FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
      JOIN pg_class c ON c.oid = t.typrelid
)
SELECT line FROM (
    SELECT 'member ' || pg_describe_object(classid, objid, 0)
           || ' comment=' || coalesce(obj_description(objid, classid::regclass::name), '-') AS line
      FROM members
    UNION ALL
    SELECT 'function ' || p.oid::regprocedure || ' acl=' || coalesce(p.proacl::text, '-') || E'\n'
           || pg_get_functiondef(p.oid)
      FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    SELECT 'relation ' || c.relname || ' kind=' || c.relkind::text || ' acl=' || coalesce(c.relacl::text, '-')
      FROM member_rels r JOIN pg_class c ON c.oid = r.oid
    UNION ALL
    SELECT 'column ' || r.relname || '.' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || ' collation=' || coalesce(a.attcollation::regcollation::text, '-')
           || ' default=' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-')
           || ' comment=' || coalesce(col_description(r.oid, a.attnum), '-')
      FROM member_rels r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
    UNION ALL
    SELECT 'constraint ' || r.relname || ' ' || con.conname || ' ' || pg_get_constraintdef(con.oid)
           || ' comment=' || coalesce(obj_description(con.oid, 'pg_constraint'), '-')
      FROM member_rels r JOIN pg_constraint con ON con.conrelid = r.oid
    UNION ALL
    -- pg_get_indexdef leaves out a collation or operator class the column has by default: print both.
    SELECT 'index ' || pg_get_indexdef(i.indexrelid) || ' collations=' || i.indcollation::text
           || ' classes=' || i.indclass::text || ' comment=' || coalesce(obj_description(i.indexrelid, 'pg_class'), '-')
      FROM member_rels r JOIN pg_index i ON i.indrelid = r.oid
    UNION ALL
    SELECT 'sequence ' || r.relname || ' ' || format_type(s.seqtypid, NULL) || ' ' || s.seqstart || ' '
           || s.seqincrement || ' ' || s.seqmin || ' ' || s.seqmax || ' ' || s.seqcache || ' ' || s.seqcycle::text
      FROM member_rels r JOIN pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT 'dumped ' || cfg::regclass || ' where=' || coalesce(e.extcondition[i], '-')
      FROM pg_extension e, unnest(e.extconfig) WITH ORDINALITY AS u(cfg, i)
     WHERE e.extname = 'idem_keys'
) lines
ORDER BY line;
