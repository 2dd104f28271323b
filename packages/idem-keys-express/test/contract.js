// The contract every idem_keys middleware shares, as data (contract/ at the repository's root, or
// $IDEM_CONTRACT_DIR): the tests load it, so the package's own tables are checked against it, never copied.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const DIR = process.env.IDEM_CONTRACT_DIR || fileURLToPath(new URL('../../../contract', import.meta.url));

export function contract(name) {
  return JSON.parse(readFileSync(`${DIR}/${name}.json`, 'utf8'));
}
