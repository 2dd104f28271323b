// Types for import (index.mjs): the declarations for require (index.d.cts), re-exported, as index.mjs re-exports
// index.cjs; one set of types, so a class or an augmentation is never declared twice.
export * from './index.cjs';
