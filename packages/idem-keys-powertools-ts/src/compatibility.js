// What the layer needs of Powertools beyond the extension points it documents, checked against the Powertools
// that is installed, once per process, instead of trusting the version number.
//
// Powertools documents a custom persistence layer as a subclass of BasePersistenceLayer with four storage
// methods (_putRecord, _getRecord, _updateRecord, _deleteRecord), each handed a record that carries the
// idempotency key and nothing of the invocation. One layer serves every call of the process, so that is not
// enough to find the fencing token of the invocation that is writing (src/claims.js). The layer relies on two
// more things, true of every release it is tested with:
//   1. the steps saveInProgress, saveSuccess and deleteRecord call their storage method before their first
//      await, so the storage method sees the payload the layer noted when the step began (src/layer.js);
//   2. configure() is called as each call starts, in that call's async context, and the call's storage methods
//      run in that same context (src/claims.js: the AsyncLocalStorage entered there).
// A release that changed either would let a late write carry another invocation's token: the write fencing
// exists to refuse. So a probe layer, a bare subclass of the installed BasePersistenceLayer that only notes how
// it is called, is run through both, and the layer refuses to run (IdempotencyUnsupportedPowertoolsError)
// where they do not hold. The first check is synchronous and runs when the first layer is constructed; the
// second needs a call to settle, so it starts then and the first claim waits for it (it settles within a few
// microtasks, no I/O).
import { AsyncLocalStorage } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { IdempotencyConfig, IdempotencyItemNotFoundError, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { BasePersistenceLayer } from '@aws-lambda-powertools/idempotency/persistence';
import { IdempotencyUnsupportedPowertoolsError } from './errors.js';

const POWERTOOLS = '@aws-lambda-powertools/idempotency';
const STEPS = [
  ['saveInProgress', '_putRecord'],
  ['saveSuccess', '_updateRecord'],
  ['deleteRecord', '_deleteRecord'],
];

let stepsChecked; // the refusal, or null once the steps were found in order
let contextChecked; // a promise of the same, for the async contexts

// Throws IdempotencyUnsupportedPowertoolsError when the steps do not call their storage methods as the layer
// needs; starts the check of the async contexts, whose refusal contextRefusal() gives.
export function checkPowertools() {
  if (stepsChecked === undefined) {
    stepsChecked = refusal(safely(stepFindings));
    contextChecked = stepsChecked ? Promise.resolve(stepsChecked) : contextFindings().then(refusal, (error) => refusal([
      `the probe of the async contexts failed: ${error?.stack ?? error}`,
    ]));
  }
  if (stepsChecked) throw stepsChecked;
}

// Resolves to the refusal (an IdempotencyUnsupportedPowertoolsError), or null: awaited before the first claim.
export const contextRefusal = () => contextChecked;

// The installed Powertools' version, from its package.json (its exports do not include that file, so it is
// found from the package's entry point upwards).
export function powertoolsVersion() {
  try {
    let dir = dirname(createRequire(import.meta.url).resolve(POWERTOOLS));
    for (;;) {
      const file = join(dir, 'package.json');
      try {
        const manifest = JSON.parse(readFileSync(file, 'utf8'));
        if (manifest.name === POWERTOOLS) return manifest.version;
      } catch (error) {
        if (error?.code !== 'ENOENT') throw error;
      }
      if (dirname(dir) === dir) return 'of an unknown version';
      dir = dirname(dir);
    }
  } catch {
    return 'of an unknown version';
  }
}

// A probe layer: Powertools' base class with storage methods that only note how they were called. Private
// fields only, so that nothing of the base class (whose own fields change between releases) is shadowed.
class ProbeLayer extends BasePersistenceLayer {
  #notes;
  #context;
  #onConfigure;

  constructor({ notes, context = () => undefined, onConfigure = () => {} }) {
    super();
    this.#notes = notes;
    this.#context = context;
    this.#onConfigure = onConfigure;
  }

  configure(options) {
    super.configure(options);
    this.#onConfigure();
  }

  async _putRecord(record) { this.#note('_putRecord', record); }

  async _updateRecord(record) { this.#note('_updateRecord', record); }

  async _deleteRecord(record) { this.#note('_deleteRecord', record); }

  async _getRecord(idempotencyKey) { throw new IdempotencyItemNotFoundError(`probe: no record for ${idempotencyKey}`); }

  #note(method, record) { this.#notes.push({ method, key: record?.idempotencyKey, context: this.#context() }); }
}

// Check 1: each step calls its storage method, with the key of the payload, before it returns its promise.
function stepFindings() {
  const notes = [];
  const probe = new ProbeLayer({ notes });
  probe.configure({ config: new IdempotencyConfig({}) });
  const payload = { probe: 'idem-keys-powertools' };
  const runs = {
    saveInProgress: () => probe.saveInProgress(payload, 60_000),
    saveSuccess: () => probe.saveSuccess(payload, 'probe'),
    deleteRecord: () => probe.deleteRecord(payload),
  };
  const findings = [];
  const keys = new Set();
  for (const [step, method] of STEPS) {
    notes.length = 0;
    Promise.resolve(runs[step]()).catch(() => {}); // the probe's promises settle on their own; nothing to wait for
    const note = notes.find((n) => n.method === method);
    if (!note) findings.push(`${step}() did not call ${method}() before its first await`);
    else keys.add(note.key);
  }
  if (keys.size > 1) findings.push(`the steps of one payload handed their storage methods different keys (${[...keys].join(', ')})`);
  return findings;
}

// Check 2: through makeIdempotent, two calls at once (one that returns, one that throws): each call's
// configure() runs as the call starts, and its storage methods run in the async context it ran in, not the
// other call's, nor the caller's.
async function contextFindings() {
  const entered = new AsyncLocalStorage();
  const notes = [];
  let starts = 0;
  const probe = new ProbeLayer({
    notes,
    context: () => entered.getStore(),
    onConfigure: () => entered.enterWith(++starts), // as the layer's ClaimRegistry enters each invocation
  });
  const work = async (event) => {
    await null;
    if (event.fails) throw new Error('probe: the function failed');
    return 'probe';
  };
  const idempotent = makeIdempotent(work, { persistenceStore: probe, config: new IdempotencyConfig({}) });
  // Idempotency switched off (POWERTOOLS_IDEMPOTENCY_DISABLED): Powertools never calls the layer.
  if (idempotent === work) return [];
  const context = { getRemainingTimeInMillis: () => 60_000 };
  const unconfigured = [];
  const calls = entered.run(0, () => [[1, false], [2, true]].map(([n, fails]) => {
    const before = starts;
    const call = idempotent({ probe: n, fails }, context);
    if (starts !== before + 1) unconfigured.push(n);
    return call;
  }));
  await Promise.allSettled(calls);
  const findings = [];
  if (unconfigured.length) {
    findings.push(`configure() was not called once as each call started (not for call ${unconfigured.join(', ')})`);
  }
  // Per payload (key): which storage methods ran, and in which of the contexts configure() entered.
  const byKey = new Map();
  for (const note of notes) byKey.set(note.key, [...(byKey.get(note.key) ?? []), note]);
  const made = [...byKey.values()].map((n) => n.map((c) => c.method).join(', ')).sort();
  const expected = ['_putRecord, _deleteRecord', '_putRecord, _updateRecord'];
  if (made.join(' / ') !== expected.join(' / ')) {
    findings.push(`a call that returned and one that threw made the storage calls ${made.map((m) => `[${m}]`).join(' ') || 'none'}`
      + `, not [${expected[1]}] and [${expected[0]}]`);
    return findings;
  }
  const contexts = [...byKey.values()].map((n) => new Set(n.map((c) => c.context)));
  const own = contexts.every((c) => c.size === 1 && ![0, undefined].includes([...c][0]));
  if (!own || [...contexts[0]][0] === [...contexts[1]][0]) {
    findings.push('the storage methods of a call did not all run in the async context its configure() ran in');
  }
  return findings;
}

function safely(find) {
  try {
    return find();
  } catch (error) {
    return [`the probe failed: ${error?.stack ?? error}`];
  }
}

function refusal(findings) {
  if (!findings.length) return null;
  const version = powertoolsVersion();
  const { peer, newest } = testedRange();
  return new IdempotencyUnsupportedPowertoolsError(
    `idem-keys-powertools refuses to run on ${POWERTOOLS} ${version}: ${findings.join('; ')}. The layer needs `
      + 'this to tell which invocation a write belongs to; without it a late write could carry another '
      + `invocation's fencing token. Use a release it is tested with (${peer}, every release up to ${newest}), or `
      + `a release of idem-keys-powertools that supports ${version}.`,
    { powertoolsVersion: version, findings },
  );
}

function testedRange() {
  try {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    return { peer: manifest.peerDependencies[POWERTOOLS], newest: manifest.devDependencies[POWERTOOLS] };
  } catch {
    return { peer: 'see its README', newest: 'the newest its README names' };
  }
}
