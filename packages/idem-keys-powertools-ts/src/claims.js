// Which claim (fencing token) belongs to which invocation. Powertools hands the layer a fresh record at each
// step (_putRecord, then _updateRecord or _deleteRecord) with nothing but the idempotency key, and one layer
// serves every call of the process, so a token kept per key would let a stale invocation finish with the token
// of the invocation that took its key over: the one write fencing must refuse. So a token is kept per
// invocation, and found again in two ways:
//   1. the async context: Powertools configures the layer synchronously as each call starts (makeIdempotent,
//      the idempotent decorator, Middy's before hook), and the call's steps run in async continuations of that
//      moment, so an AsyncLocalStorage entered there follows the call and no other;
//   2. the payload object: Powertools hashes the same object (the event) at each step of one call, and Middy
//      may run its after and onError hooks outside the async context its before hook ran in.
// The async context is asked first, unless what it holds for the key was tried with another payload object:
// then it is another invocation's context, and the payload answers.
import { AsyncLocalStorage } from 'node:async_hooks';

class Invocation {
  constructor(parent) {
    // An invocation still holding claims when this one started: the caller of a nested idempotent call, whose
    // async context the nested call's start has replaced (see begin()).
    this.parent = parent;
    this.tried = new Map(); // idempotency key -> the payload it was tried with, got or not
    this.tokens = new Map(); // idempotency key -> token (a bigint as a decimal string), for the keys it got
  }
}

export class ClaimRegistry {
  #context = new AsyncLocalStorage();
  #byPayload = new WeakMap(); // payload object -> Map(idempotency key -> token)

  // A call starts. enterWith changes the context of the code that called the idempotent function too, for the
  // rest of its synchronous run: that code's next call gets a new invocation in turn, and an idempotent
  // function called from inside another's (before its first await) links to the caller's, still open, so that
  // the caller finds its own token again. Only open invocations are linked: the chain is as long as the
  // nesting, not as the history of calls.
  begin() {
    let parent = this.#context.getStore();
    while (parent && parent.tokens.size === 0) parent = parent.parent;
    this.#context.enterWith(new Invocation(parent));
  }

  // Before the claim: from now on this invocation answers for the key, whether it gets the claim or not.
  trying(idempotencyKey, payload) {
    this.#context.getStore()?.tried.set(idempotencyKey, payload);
  }

  hold(idempotencyKey, payload, token) {
    this.#context.getStore()?.tokens.set(idempotencyKey, token);
    if (isObject(payload)) {
      let tokens = this.#byPayload.get(payload);
      if (!tokens) this.#byPayload.set(payload, (tokens = new Map()));
      tokens.set(idempotencyKey, token);
    }
  }

  // The token of this invocation's claim of the key, or undefined.
  get(idempotencyKey, payload) {
    const invocation = this.#answering(idempotencyKey, payload);
    if (invocation) return invocation.tokens.get(idempotencyKey);
    return isObject(payload) ? this.#byPayload.get(payload)?.get(idempotencyKey) : undefined;
  }

  // The claim is settled (finished, released, or lost to another invocation): forget it.
  forget(idempotencyKey, payload) {
    const invocation = this.#answering(idempotencyKey, payload);
    invocation?.tried.delete(idempotencyKey);
    invocation?.tokens.delete(idempotencyKey);
    if (isObject(payload)) this.#byPayload.get(payload)?.delete(idempotencyKey);
  }

  // The invocation of this async context that tried the key: the first up the chain, so that a nested call
  // that did not get a key (in progress elsewhere, replayed) never finds its caller's claim of the same key.
  // None when that one tried it with another payload object: the context is another invocation's.
  #answering(idempotencyKey, payload) {
    for (let invocation = this.#context.getStore(); invocation; invocation = invocation.parent) {
      if (!invocation.tried.has(idempotencyKey)) continue;
      const triedWith = invocation.tried.get(idempotencyKey);
      if ((isObject(payload) || isObject(triedWith)) && triedWith !== payload) return undefined;
      return invocation;
    }
    return undefined;
  }
}

const isObject = (value) => value !== null && (typeof value === 'object' || typeof value === 'function');
