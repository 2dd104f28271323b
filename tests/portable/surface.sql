-- The API both editions share, one property per line, for tests/portable/run.sh to diff: every idem_*
-- function and procedure (the portable edition's own idem_keys_* helpers aside), the result types, the table's
-- columns, constraints and indexes, and the token sequence. What must differ is left out: the language, and
-- the SET search_path that the extension's hot verbs pin in code instead.
SELECT format('%s %s(%s) returns %s; %s strict=%s definer=%s parallel=%s public_execute=%s',
              CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END, p.proname,
              pg_get_function_arguments(p.oid), coalesce(pg_get_function_result(p.oid), '-'),
              CASE p.provolatile WHEN 'i' THEN 'immutable' WHEN 's' THEN 'stable' ELSE 'volatile' END,
              p.proisstrict, p.prosecdef, p.proparallel, has_function_privilege('public', p.oid, 'EXECUTE'))
  FROM pg_proc AS p
 WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'idem\_%'
   AND p.proname NOT LIKE 'idem\_keys\_%'
 ORDER BY 1;
SELECT format('type %s.%s %s', t.typname, a.attname, format_type(a.atttypid, a.atttypmod))
  FROM pg_type AS t JOIN pg_attribute AS a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE t.typnamespace = current_schema()::regnamespace AND t.typname IN ('idem_result', 'idem_sweep_progress')
 ORDER BY t.typname, a.attnum;
SELECT format('column %s %s %s not_null=%s collation=%s', a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
              a.attnotnull, coalesce(c.collname, '-'))
  FROM pg_attribute AS a LEFT JOIN pg_collation AS c ON c.oid = a.attcollation AND a.attcollation <> 0
 WHERE a.attrelid = 'idem_keys'::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;
SELECT format('constraint %s %s', c.conname, pg_get_constraintdef(c.oid))
  FROM pg_constraint AS c WHERE c.conrelid = 'idem_keys'::regclass ORDER BY 1;
SELECT format('index %s', pg_get_indexdef(i.indexrelid))
  FROM pg_index AS i WHERE i.indrelid = 'idem_keys'::regclass ORDER BY 1;
SELECT format('sequence %s %s public_usage=%s table_public=%s', s.seqrelid::regclass, format_type(s.seqtypid, NULL),
              has_sequence_privilege('public', s.seqrelid, 'USAGE'),
              has_table_privilege('public', 'idem_keys', 'SELECT, INSERT, UPDATE, DELETE'))
  FROM pg_sequence AS s WHERE s.seqrelid = 'idem_keys_token_seq'::regclass;
