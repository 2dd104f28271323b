// The SQL the middleware sends is contract/sql.json's, statement for statement, after folding whitespace.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SQL } from '../src/store.cjs';
import { contract } from './contract.js';

const fold = (text) => text.replace(/\s+/g, ' ').trim();

test('every statement of contract/sql.json, and no other', () => {
  const { statements } = contract('sql');
  assert.deepEqual(Object.keys(SQL).sort(), Object.keys(statements).sort());
  for (const [name, { sql }] of Object.entries(statements)) assert.equal(fold(SQL[name]), fold(sql), name);
});
