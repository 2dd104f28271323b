// A CommonJS application of the packed package: require() loads it, import() gets the very same module.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');
const { exercise } = require('./exercise.cjs');

const viaRequire = require('idem-keys-express');

(async () => {
  assert.equal(require.resolve('idem-keys-express'), path.join(__dirname, 'node_modules/idem-keys-express/index.cjs'));
  const viaImport = await import('idem-keys-express');
  assert.equal('default' in viaImport, false, 'import found index.mjs (a CommonJS file would have a default)');
  for (const name of ['idempotency', 'releaseOnError', 'parseKey', 'DEFAULT_STORED_HEADERS', 'TransactionEndedError']) {
    assert.equal(viaImport[name], viaRequire[name], `${name}: one instance`);
  }
  assert.ok(new viaRequire.TransactionEndedError() instanceof viaImport.TransactionEndedError);
  await exercise(viaRequire);
  console.log(`consumer.cjs: require on Node.js ${process.versions.node}: ok`);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
