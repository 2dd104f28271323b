// An ES module application of the packed package: import loads it, require() (createRequire) gets the very same.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as viaImport from 'idem-keys-express';
import { TransactionEndedError, idempotency } from 'idem-keys-express';
import { exercise } from './exercise.cjs';

const require = createRequire(import.meta.url);
const viaRequire = require('idem-keys-express');

assert.equal('default' in viaImport, false, 'import found index.mjs (a CommonJS file would have a default)');
assert.deepEqual(Object.keys(viaImport).sort(), Object.keys(viaRequire).sort(), 'the same names both ways');
for (const name of Object.keys(viaRequire)) assert.equal(viaImport[name], viaRequire[name], `${name}: one instance`);
assert.equal(idempotency, viaRequire.idempotency);
assert.ok(new viaRequire.TransactionEndedError() instanceof TransactionEndedError);
assert.ok(new TransactionEndedError() instanceof viaRequire.TransactionEndedError);
await exercise(viaImport);
console.log(`consumer.mjs: import on Node.js ${process.versions.node}: ok`);
