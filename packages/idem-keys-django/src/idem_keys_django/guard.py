"""The rules of docs/integrations.md for one Django request, shared by the middleware, the view decorator and the
DRF mixin: `begin` (the key, the scope, the body, the claim), then `finish` with the view's answer, or `abort`
when the view raised."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.core.signals import got_request_exception
from django.db import Error as DatabaseError
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse, UnreadablePostError
from django.http.response import HttpResponseBase
from idem_keys_core import Claim, Problem, Request, outcomes, problems, statements
from idem_keys_core.answers import headers_to_store, replay_fields
from psycopg.pq import TransactionStatus

from . import commit, store
from .attempt import Attempt
from .conf import Options
from .keys import parse_idempotency_key
from .problems import respond

# WSGI's and ASGI's name of the Idempotency-Key field. Servers join repeated fields into it with commas.
_KEY_META = "HTTP_IDEMPOTENCY_KEY"


class Guard:
    """One configuration (IDEM_KEYS, with a view's own options over it) applied to requests."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._log = options.log

    @property
    def alias(self) -> str:
        return self.options.database

    def covers(self, request: HttpRequest) -> bool:
        return request.method in self.options.methods

    # ---- before the view ---------------------------------------------------------------------------------------

    def begin(self, request: HttpRequest, scope_request: Any = None,
              transactional: bool | Callable[[], bool] | None = None) -> Attempt | HttpResponseBase | None:
        """None: the request is not for this guard (another method, or no key where none is required): run the
        view untouched. A response: send it instead of running the view (a problem, or the first answer's
        replay). An Attempt: the key is claimed (in transactional mode inside the request's transaction, now open
        on the alias' connection): run the view, then `finish` with its answer, or `abort` if it raised.

        `scope_request` is what the scope function gets, when it is not `request` (DRF's Request).
        `transactional` overrides the options' mode for this request (a view outside ATOMIC_REQUESTS); a function
        is asked only once a key is about to be claimed (the middleware resolves the URL in it)."""
        if not self.covers(request):
            return None
        field = request.META.get(_KEY_META)
        if field is None:
            return respond(problems.KEY_MISSING) if self.options.required else None
        key = parse_idempotency_key(field)
        if key is None:
            return respond(problems.KEY_MALFORMED)
        tenant = self.options.scope(request if scope_request is None else scope_request)
        if tenant is not None and not isinstance(tenant, str):
            raise TypeError(f"the scope function returned {type(tenant).__name__}, not str or None")
        if not tenant:
            self._log.error("idempotency: the scope function gave no scope for %s %s", request.method, request.path)
            return respond(problems.SCOPE_MISSING)
        body = _read_body(request, self.options.max_body_bytes)
        if isinstance(body, Problem):
            return respond(body)
        fingerprint = Request(str(request.method), _target(request), body, _is_json(request.META))
        connection = connections[self.alias]
        mode = self.options.transactional if transactional is None else transactional
        if mode() if callable(mode) else mode:
            return self._claim_in_transaction(connection, tenant, key, fingerprint)
        try:
            claim = store.claim(connection, tenant, key, fingerprint, self.options.lease, self.options.wait)
        except DatabaseError as e:
            self._log.warning("idempotency: claim of %r in %r failed: %s", key, tenant, e)
            return respond(problems.STORE_UNAVAILABLE)
        if claim.outcome in ("claimed", "recovered") and claim.token is not None:
            return Attempt(tenant, key, claim.outcome, claim.token, self.alias, False)
        return self._answer(claim)

    def _claim_in_transaction(self, connection: BaseDatabaseWrapper, tenant: str, key: str,
                              fingerprint: Request) -> Attempt | HttpResponseBase:
        # Durable: this block must be the outermost, so that its COMMIT is the request's, and a failed one can
        # still be answered (Django's TestCase blocks excepted: there the test's transaction is outermost).
        atomic = transaction.atomic(using=self.alias, durable=True)
        try:
            atomic.__enter__()
        except DatabaseError as e:
            self._log.warning("idempotency: the transaction for %r in %r could not begin: %s", key, tenant, e)
            return respond(problems.STORE_UNAVAILABLE)
        except RuntimeError as e:
            raise RuntimeError(f"idempotency: the transactional mode opens the request's transaction on "
                               f"{self.alias!r}, but an atomic block is open there already (an outer "
                               f"middleware's?)") from e
        try:
            claim = self._claim_in(connection, atomic, tenant, key, fingerprint)
        except BaseException as e:
            commit.roll_back(atomic, e)
            if not isinstance(e, DatabaseError):
                raise
            self._log.warning("idempotency: claim of %r in %r failed: %s", key, tenant, e)
            return respond(problems.STORE_UNAVAILABLE)
        if claim.outcome in ("claimed", "recovered") and claim.token is not None:
            attempt = Attempt(tenant, key, claim.outcome, claim.token, self.alias, True, _atomic=atomic)
            if _outermost(connection, atomic):
                # The first of the transaction's on_commit hooks, so it runs before any of the view's: once it has
                # run, the COMMIT succeeded, whatever a later hook raises (commit.py). Only where the block's end
                # is a COMMIT: inside a test's transaction (TestCase) it releases a savepoint, no hook runs, and
                # captureOnCommitCallbacks() would count this one among the view's.
                transaction.on_commit(attempt._note_committed, using=self.alias)
            return attempt
        commit.roll_back(atomic)  # a replay, a duplicate, a mismatch: the claim wrote nothing
        return self._answer(claim)

    def _claim_in(self, connection: BaseDatabaseWrapper, atomic: transaction.Atomic, tenant: str, key: str,
                  fingerprint: Request) -> Claim:
        if _outermost(connection, atomic):
            def restart() -> None:
                # Nothing was written in the transaction yet. Django forbids a rollback inside atomic, so
                # psycopg's own: psycopg then begins the next transaction with the next statement, and Django's
                # block goes on around it none the wiser.
                raw = connection.connection
                assert raw is not None and not connection.savepoint_ids
                with connection.wrap_database_errors:  # a lost connection is Django's error, and noted as one
                    raw.rollback()
            return store.claim(connection, tenant, key, fingerprint, self.options.lease, self.options.wait, restart)
        # Inside a TestCase's transaction (tests of an application): a savepoint stands in for the restart.
        savepoint = connection.savepoint()
        assert savepoint is not None  # None only outside a transaction

        def back_to_savepoint() -> None:
            connection.savepoint_rollback(savepoint)
        claim = store.claim(connection, tenant, key, fingerprint, self.options.lease, self.options.wait,
                            back_to_savepoint)
        connection.savepoint_commit(savepoint)
        return claim

    def _answer(self, claim: Claim) -> HttpResponseBase:
        if claim.outcome == "replay":
            return self._replay(claim)
        if claim.outcome == "in_progress":
            response = respond(problems.in_progress(claim.retry_after))
        elif claim.outcome == "mismatch":
            response = respond(problems.KEY_REUSED)
        else:
            return respond(outcomes.unknown_outcome(self._log, claim.outcome))
        return self._named(response, claim.outcome)

    def _replay(self, claim: Claim) -> HttpResponseBase:
        body = claim.response or b""
        response = HttpResponse(body, status=claim.status_code or 200)
        del response["Content-Type"]  # only what was stored: HttpResponse would add text/html
        for name, value in replay_fields(claim.headers):
            response[name] = value
        response["Content-Length"] = str(len(body))
        response["Idempotent-Replayed"] = "true"
        return self._named(response, claim.outcome)

    def _named(self, response: HttpResponseBase, outcome: str) -> HttpResponseBase:
        if self.options.outcome_header:
            response[self.options.outcome_header] = outcome
        return response

    # ---- after the view ----------------------------------------------------------------------------------------

    def finish(self, attempt: Attempt, response: HttpResponseBase) -> HttpResponseBase:
        """Stores, releases or leaves the key as the view's answer says; the response to send: that answer, or
        the problem that replaces it. A view that raised, answered by Django's 500 page, is marked by the
        got_request_exception signal (below)."""
        if attempt.transactional:
            response = self._finish_in(attempt, response)
        else:
            response = self._finish_alone(attempt, response)
        return self._named(response, attempt.outcome)

    def _finish_alone(self, attempt: Attempt, response: HttpResponseBase) -> HttpResponseBase:
        """Two-step mode: each call commits on its own."""
        if attempt.unsettled:
            return response
        status = response.status_code
        if attempt._raised or status in self.options.retryable_statuses:
            self._release(attempt)
            return response
        body = _hold(response)
        try:
            store.finish(connections[attempt.using], attempt.scope, attempt.key, attempt.token, status, body,
                         self._headers_to_store(response), self.options.retention)
        except DatabaseError as e:
            return respond(outcomes.finish_refused(self._log, attempt, status, e))
        return response

    def _finish_in(self, attempt: Attempt, response: HttpResponseBase) -> HttpResponseBase:
        """Transactional mode: the answer is stored in the transaction that holds the claim and the view's work,
        and the client hears of it only once that transaction committed."""
        atomic, attempt._atomic = attempt._atomic, None
        if atomic is None:
            raise RuntimeError("idempotency: the attempt's transaction has ended already")
        connection = connections[attempt.using]
        status = response.status_code
        if attempt._raised:
            commit.explain(self._log, attempt, attempt._error)
            if attempt.unsettled:
                commit.commit(self._log, attempt, atomic, "the unsettled claim")  # logged; Django's 500 goes on
            else:
                commit.roll_back(atomic)  # its work and the claim vanish: the key is free at once
            return response
        try:
            if not attempt.unsettled:  # unsettled: no answer to store, straight to the COMMIT (which checks)
                problem = self._lost_or_ended(attempt, connection, atomic, status)
                if problem is not None:
                    return respond(problem)
                if status in self.options.retryable_statuses:
                    commit.roll_back(atomic)  # its work and the claim vanish: the key is free at once
                    return response
                if connection.needs_rollback or _transaction_status(connection) == TransactionStatus.INERROR:
                    self._log.error("idempotency: %r in %r: a statement failed in the request's transaction, which "
                                    "cannot be committed; the %d answer is not stored", attempt.key, attempt.scope,
                                    status)
                    commit.roll_back(atomic)
                    return respond(problems.STORE_FAILED)
                body = _hold(response)
                try:
                    store.finish(connection, attempt.scope, attempt.key, attempt.token, status, body,
                                 self._headers_to_store(response), self.options.retention)
                except DatabaseError as e:
                    commit.roll_back(atomic)
                    return respond(outcomes.finish_refused(self._log, attempt, status, e))
        except BaseException as e:
            commit.roll_back(atomic, e)
            raise
        what = f"the unsettled {status} answer" if attempt.unsettled else f"the {status} answer"
        problem = commit.commit(self._log, attempt, atomic, what)
        return response if problem is None else respond(problem)

    def _lost_or_ended(self, attempt: Attempt, connection: BaseDatabaseWrapper, atomic: transaction.Atomic,
                       status: int) -> Problem | None:
        """STORE_FAILED, logged and rolled back, when the transaction is gone before the answer could be stored in
        it: its connection was lost, or the view ended it."""
        state = _transaction_status(connection)
        if state == TransactionStatus.UNKNOWN:
            # Lost before its COMMIT was sent (the view went on after a statement that saw the session end):
            # PostgreSQL rolled it all back with the session.
            self._log.error("idempotency: %r in %r: the connection was lost before the COMMIT of the %d answer, "
                            "which was not sent: nothing was committed (the server rolled the transaction back with "
                            "the session)", attempt.key, attempt.scope, status)
        elif state not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            # The view ended the transaction itself (a raw COMMIT or ROLLBACK): what is committed is not known.
            self._log.error("idempotency: %r in %r: the view ended the request's transaction itself; the %d answer "
                            "is not stored", attempt.key, attempt.scope, status)
        else:
            return None
        commit.roll_back(atomic)
        return problems.STORE_FAILED

    def abort(self, attempt: Attempt, error: BaseException) -> None:
        """The view raised before its answer (the exception goes on after this): its key is released, in
        transactional mode its work rolled back with the claim. Unless it left the key unsettled first: its
        outcome is unknown, so the claim stays (and commits, unfinished) until its lease ends. A BaseException that
        is not an Exception (the worker is stopping) leaves the claim to its lease too."""
        atomic, attempt._atomic = attempt._atomic, None
        if attempt.transactional:
            if atomic is None:
                return
            commit.explain(self._log, attempt, error)
            if attempt.unsettled and isinstance(error, Exception):
                commit.commit(self._log, attempt, atomic, "the unsettled claim")  # logged; the exception goes on
            else:
                commit.roll_back(atomic, error)
        elif isinstance(error, Exception) and not attempt.unsettled:
            self._release(attempt)

    def _release(self, attempt: Attempt) -> None:
        try:
            if not store.release(connections[attempt.using], attempt.scope, attempt.key, attempt.token):
                self._log.info("idempotency: %r in %r was taken over before its release", attempt.key, attempt.scope)
        except DatabaseError as e:
            # Harmless to the client: the claim then runs out its lease and the next request recovers the key.
            self._log.warning("idempotency: release of %r in %r failed: %s", attempt.key, attempt.scope, e)

    def _headers_to_store(self, response: HttpResponseBase) -> dict[str, str]:
        return headers_to_store(response.items(), self.options.stored_headers)

def _outermost(connection: BaseDatabaseWrapper, atomic: transaction.Atomic) -> bool:
    """Whether atomic is the transaction itself, not a savepoint inside a test's (TestCase's) transaction."""
    return bool(connection.atomic_blocks) and connection.atomic_blocks[0] is atomic


def _transaction_status(connection: BaseDatabaseWrapper) -> TransactionStatus | None:
    raw = connection.connection
    if raw is None or not connection.in_atomic_block:
        return None
    status: TransactionStatus = raw.info.transaction_status
    return status


def _hold(response: HttpResponseBase) -> bytes:
    """The whole body of the answer, which is then sent from memory: a streamed one is read to its end first (the
    answer is stored before the client sees any of it)."""
    if response.streaming:
        body = b"".join(response)  # Django's own iteration, which also consumes an async iterator
        response.streaming_content = [body]  # type: ignore[attr-defined]
        return body
    content: bytes = response.content  # type: ignore[attr-defined]
    return content


def _read_body(request: HttpRequest, limit: int) -> bytes | Problem:
    """The whole request body (the fingerprint covers it), read into request.body, where the view and DRF's
    parsers find it again. Django reads no more than Content-Length."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0  # as Django reads it
    if length > limit:
        return problems.BODY_TOO_LARGE  # not read: nothing is claimed
    try:
        return request.body
    except RequestDataTooBig:  # DATA_UPLOAD_MAX_MEMORY_SIZE is below the limit
        return problems.BODY_TOO_LARGE
    except UnreadablePostError:  # the client went away while sending it
        return problems.BODY_UNREADABLE


def _target(request: HttpRequest) -> str:
    """Path and query as the client sent them, not decoded, so /a%2Fb and /a/b stay two requests: gunicorn's
    RAW_URI, uWSGI's REQUEST_URI, an ASGI server's raw_path; else (Django's test client) the path Django
    re-quotes."""
    raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI")
    if isinstance(raw, str) and raw.startswith("/"):
        return raw
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and isinstance(scope.get("raw_path"), bytes):
        path = scope["raw_path"].decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        return f"{path}?{query}" if query else path
    return request.get_full_path()


def _is_json(meta: dict[str, Any]) -> bool:
    """The request's Content-Type and Content-Encoding, by idem_keys_core's rule."""
    return statements.is_json(meta.get("CONTENT_TYPE"), meta.get("HTTP_CONTENT_ENCODING"))

def _note_exception(sender: Any, request: Any = None, **kwargs: Any) -> None:
    """Django answers an exception of the view (or of a middleware inside this one) with its 500 page before the
    middleware sees the answer; this signal, sent just before, says that the 500 is an exception's: the key is
    released rather than the page stored."""
    attempt = getattr(request, "idempotency", None)
    if isinstance(attempt, Attempt):
        attempt._raised = True
        attempt._error = sys.exc_info()[1]  # sent from inside Django's except block


got_request_exception.connect(_note_exception, dispatch_uid="idem_keys_django.guard.note_exception")
