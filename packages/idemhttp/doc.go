// Package idemhttp puts idem_keys in front of a net/http handler: a request with an Idempotency-Key runs its
// handler at most once, and every retry gets the first answer back, byte for byte.
//
// It is a thin layer over the extension's SQL API (idem_claim, idem_finish, idem_release) on pgx v5: it keeps
// no table and no state of its own, and works the same with the extension and with its portable edition. The
// behaviour, the same in the Go, Python, Node and Ruby packages, is specified in docs/integrations.md of the
// idem_keys repository.
//
//	mw, err := idemhttp.New(pool, idemhttp.Options{
//		Scope: func(r *http.Request) string { return tenantOf(r) }, // from authentication, never a client header
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	http.Handle("/payments", authenticate(mw(payments)))
//
// The handler learns about its attempt from FromContext: whether it took over the key of an owner that died
// (Recovered, so it must look for what that owner did before acting), and it may leave the key unsettled when
// it cannot tell whether its side effect happened.
//
// With Options.Transactional the claim, the handler's SQL (on Tx(r.Context())) and the stored answer are one
// transaction, committed once: the key and the work it guards commit together or not at all.
//
// The handler's answer is held in memory until it is stored, so a client never sees an answer a retry could
// not replay: Flush does nothing, and a streamed answer reaches the client whole, at the end.
//
// The module's version is its tag (packages/idemhttp/vX.Y.Z in the idem_keys repository); a program reads the one it
// was built with from runtime/debug.ReadBuildInfo.
package idemhttp
