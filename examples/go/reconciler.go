package main

import (
	"context"
	"log"
	"time"
)

// reconcile settles every key whose owner died without finishing: if the provider holds a charge under the key,
// the key is finished with the answer the owner would have given; if not, nothing was charged and the key is
// released for the client's retry. It runs with the dead owner's token, so a retry that recovers the key at the
// same moment wins and our finish is refused (55000), which is fine.
//
// Releasing is safe even if the "dead" owner was only slow and charges after we looked: its finish is then
// refused, its client retries, and the provider, idempotent by reference, returns that same charge.
func reconcile(ctx context.Context, store *Store, provider *Provider) (finished, released int) {
	stale, err := store.Stale(ctx)
	if err != nil {
		log.Printf("reconcile: idem_stale: %v", err)
		return 0, 0
	}
	for _, s := range stale {
		ch, err := provider.Lookup(ctx, s.Key)
		if err != nil {
			log.Printf("reconcile %q: %v (next pass)", s.Key, err)
			continue
		}
		if ch == nil {
			if ok, err := store.Release(ctx, s.Key, s.Token); err != nil {
				log.Printf("reconcile %q: idem_release: %v", s.Key, err)
			} else if ok {
				released++
			}
			continue
		}
		status, headers, body := paymentAnswer(ch)
		if err := store.Finish(ctx, s.Key, s.Token, status, body, headers); err != nil {
			log.Printf("reconcile %q: idem_finish: %v", s.Key, err)
			continue
		}
		finished++
	}
	return finished, released
}

func reconcileLoop(store *Store, provider *Provider, every time.Duration) {
	for range time.Tick(every) {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		if finished, released := reconcile(ctx, store, provider); finished+released > 0 {
			log.Printf("reconcile: %d finished, %d released", finished, released)
		}
		cancel()
	}
}
