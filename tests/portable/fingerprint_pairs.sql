-- Pairs that must (expected = true) or must not (false) share a fingerprint, in both editions. Prints the
-- pairs where either edition disagrees: tests/portable/run.sh fails on any line.
SELECT format('%s vs %s: expected %s, extension %s, portable %s', a, b, expected,
              public.idem_fingerprint(a::jsonb) = public.idem_fingerprint(b::jsonb),
              portable.idem_fingerprint(a::jsonb) = portable.idem_fingerprint(b::jsonb))
  FROM (VALUES ('1.0', '1', true), ('1.50', '1.5', true), ('-0.0', '0', true), ('-0', '0', true),
               ('{"a": 1, "b": 2}', '{"b": 2.00, "a": 1}', true), ('[1e2]', '[100]', true),
               ('{"a": 1, "a": 2}', '{"a": 2}', true), ('10', '1', false), ('100', '1', false),
               ('1.01', '1.1', false), ('"1.0"', '"1"', false), ('1', '"1"', false), ('{"a": 1}', '{"a": [1]}', false),
               ('[1, 2]', '[2, 1]', false), ('{"1.0": 1}', '{"1": 1}', false), ('null', '"null"', false),
               ('{"k": "-0"}', '{"k": "0"}', false), ('0.10', '0.1', true), ('1.10', '1.1', true),
               ('{"n": -1.500}', '{"n": -1.5}', true), ('true', '"true"', false)) AS p(a, b, expected)
 WHERE (public.idem_fingerprint(a::jsonb) = public.idem_fingerprint(b::jsonb)) <> expected
    OR (portable.idem_fingerprint(a::jsonb) = portable.idem_fingerprint(b::jsonb)) <> expected;
