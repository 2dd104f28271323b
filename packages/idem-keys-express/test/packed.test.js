// The package as a user gets it: `npm pack`, installed into a project of its own, then loaded by a CommonJS
// application (require) and by an ES module (import), each checking that the other way gives the very same module,
// and both typed by tsc under module node16 and nodenext. The project is made under node_modules, so express, pg
// and typescript resolve from the package's own dev dependencies, as they would from a user's.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

const PACKAGE = fileURLToPath(new URL('..', import.meta.url));
const FIXTURES = fileURLToPath(new URL('packed', import.meta.url));
const TSC = join(PACKAGE, 'node_modules/typescript/bin/tsc');
let project;

// npm runs on the node its own script names (the machine's), whatever node runs these tests.
const npm = (args, cwd) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'],
  { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });

before(() => {
  project = mkdtempSync(join(PACKAGE, 'node_modules', '.packed-consumer-'));
  npm(['pack', '--silent', '--pack-destination', project], PACKAGE);
  const [tarball] = readdirSync(project).filter((name) => name.endsWith('.tgz'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  // Only the tarball: express and pg, its peers, are the application's own (here, the dev dependencies).
  npm(['install', '--no-save', '--offline', '--legacy-peer-deps', `./${tarball}`], project);
  cpSync(FIXTURES, project, { recursive: true });
});
after(() => rmSync(project, { recursive: true, force: true }));

// Runs a consumer on the node running these tests; its output, or the failure with it.
function run(file) {
  const result = spawnSync(process.execPath, [file], { cwd: project, encoding: 'utf8', timeout: 60_000 });
  assert.equal(result.status, 0, `${file}:\n${result.stdout}${result.stderr}`);
  return result.stdout;
}

test('the tarball holds the package\'s files and nothing else', () => {
  const installed = join(project, 'node_modules/idem-keys-express');
  assert.deepEqual(readdirSync(installed).sort(),
    ['CHANGELOG.md', 'README.md', 'index.cjs', 'index.d.cts', 'index.d.ts', 'index.mjs', 'package.json', 'src']);
});

test('require: a CommonJS application, and import() from it, get one instance', () => {
  assert.match(run('consumer.cjs'), /consumer\.cjs: require on Node\.js .*: ok/);
});

test('import: an ES module, and require() from it, get one instance', () => {
  assert.match(run('consumer.mjs'), /consumer\.mjs: import on Node\.js .*: ok/);
});

// Which declaration file each consumer's 'idem-keys-express' resolved to, from tsc's trace.
function resolvedTypes(trace) {
  const found = {};
  let from;
  for (const line of trace.split('\n')) {
    const resolving = /^======== Resolving module 'idem-keys-express' from '(.*)'\. ========$/.exec(line);
    if (resolving) from = resolving[1].split('/').pop();
    const resolved = /^======== Module name 'idem-keys-express' was successfully resolved to '(.*?)'/.exec(line);
    if (resolved && from) {
      found[from] = resolved[1].split('/node_modules/').pop();
      from = undefined;
    }
  }
  return found;
}

for (const module of ['nodenext', 'node16']) {
  test(`types: tsc on a .cts (require: index.d.cts) and a .mts (import: index.d.ts), module ${module}`, () => {
    const result = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json', '--module', module, '--moduleResolution',
      module, '--traceResolution'], { cwd: project, encoding: 'utf8', timeout: 120_000, maxBuffer: 1 << 28 });
    const errors = result.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
    assert.deepEqual(errors, [], 'tsc found errors');
    assert.equal(result.status, 0, result.stderr);
    assert.deepEqual(resolvedTypes(result.stdout), {
      'consumer.cts': 'idem-keys-express/index.d.cts',
      'consumer.mts': 'idem-keys-express/index.d.ts',
    });
  });
}
