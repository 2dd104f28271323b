// Run by compatibility.test.js in a process of its own: plants a fault in the installed Powertools (on
// BasePersistenceLayer.prototype, before the layer is loaded), then makes a layer and calls an idempotent
// function through it, and prints what happened as one line of JSON.
//   node test/planted-powertools.js FAULT
// FAULT: none, put-after-await, update-after-await, delete-after-await (the step awaits once before it calls
// its storage method), put-in-another-context (saveInProgress calls _putRecord at once, but from an async
// context of its own, as a write queue would).
import { AsyncResource } from 'node:async_hooks';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { BasePersistenceLayer } from '@aws-lambda-powertools/idempotency/persistence';

const fault = process.argv[2];
const base = BasePersistenceLayer.prototype;
const awaitFirst = (step) => {
  const original = base[step];
  base[step] = async function (...args) {
    await null;
    return original.apply(this, args);
  };
};
const elsewhere = new AsyncResource('planted-write-queue'); // made now: the context of this module's top level

switch (fault) {
  case 'none': break;
  case 'put-after-await': awaitFirst('saveInProgress'); break;
  case 'update-after-await': awaitFirst('saveSuccess'); break;
  case 'delete-after-await': awaitFirst('deleteRecord'); break;
  case 'put-in-another-context': {
    const original = base.saveInProgress;
    base.saveInProgress = function (...args) {
      return elsewhere.runInAsyncScope(() => original.apply(this, args));
    };
    break;
  }
  default: throw new Error(`unknown fault ${fault}`);
}

const { IdemKeysPersistenceLayer, IdempotencyUnsupportedPowertoolsError } = await import('../index.js');
const describe = (error) => error && {
  name: error.name,
  message: error.message,
  refusal: error instanceof IdempotencyUnsupportedPowertoolsError,
  powertoolsVersion: error.powertoolsVersion,
  findings: error.findings,
  cause: describe(error.cause),
};

// A pool that only counts: no test here needs a database, and a refused layer must not reach one.
let queries = 0;
const pool = { query: async () => { queries += 1; throw new Error('the pool of planted-powertools.js has no database'); } };
const outcome = { fault };
try {
  const persistenceStore = new IdemKeysPersistenceLayer({ pool, scope: 'planted' });
  outcome.constructed = true;
  const charge = makeIdempotent(async () => 'charged', { persistenceStore, config: new IdempotencyConfig({}) });
  await charge({ orderId: 'o-1' }, { getRemainingTimeInMillis: () => 60_000 }).then(
    (result) => { outcome.result = result; },
    (error) => { outcome.callError = describe(error); },
  );
} catch (error) {
  outcome.constructed = false;
  outcome.constructorError = describe(error);
}
outcome.queries = queries;
console.log(JSON.stringify(outcome));
