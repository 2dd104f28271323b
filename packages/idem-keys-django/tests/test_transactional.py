"""IdempotencyMiddleware in transactional mode, against a real idem_keys database ($DATABASE_URL): the claim, the
view's writes (on Django's connection of the alias) and the stored answer commit together, once, or not at all.
Two ways in: TRANSACTIONAL True on "default", and the "atomic" alias, whose ATOMIC_REQUESTS the middleware follows
(Django's own atomic block around the view is then a savepoint of the middleware's transaction). Every test ends
with the connections of its thread outside any transaction (conftest.py)."""
import threading
import time

import pytest
from django.db import DatabaseError, connections, transaction
from django.http import HttpResponse
from django.test import Client, TestCase

from conftest import PROBLEMS, client, expect_problem, fresh_key, in_thread, post, stored, writes
from test_middleware import started, use

COMMIT_UNKNOWN = PROBLEMS["commit-unknown"]["body"].encode()  # contract/problems.json's bytes
COMMIT_FAILED = PROBLEMS["commit-failed"]["body"].encode()


@pytest.fixture(params=["TRANSACTIONAL", "ATOMIC_REQUESTS"])
def mode(request, settings, tables):
    """Both switches of the mode, each test run under each."""
    if request.param == "TRANSACTIONAL":
        use(settings, TRANSACTIONAL=True)
    else:
        use(settings, DATABASE="atomic")  # TRANSACTIONAL None: follows the alias' ATOMIC_REQUESTS
    return request.param


def write(request, attempt, outcome=None):
    """One row on the request's connection, in its transaction."""
    with connections[attempt.using].cursor() as cursor:
        cursor.execute("INSERT INTO django_tx_writes VALUES (%s, %s, %s)",
                       (attempt.scope, attempt.key, outcome or attempt.outcome))


def writing(then=None, transactional=True):
    """An answer that first writes one row, then answers `then` (201 by default)."""
    def answer(request, attempt):
        assert attempt.transactional is transactional
        assert connections[attempt.using].in_atomic_block or not transactional
        write(request, attempt)
        return then(request, attempt) if then else HttpResponse(b"paid", status=201, headers={"Location": "/pay/1"})
    return answer


def test_one_commit_holds_the_write_and_the_answer(mode, handler, tenant):
    seen_outside = []

    def look_from_outside(request, attempt):
        # Another connection sees neither the write nor the claim's row until the one COMMIT.
        seen_outside.append((writes(tenant), stored(tenant, attempt.key)))
        return HttpResponse(b"paid", status=201, headers={"Location": "/pay/1"})
    handler.answer = writing(look_from_outside)
    c, key = client(), fresh_key()
    first = post(c, tenant, key)
    again = post(c, tenant, key)
    assert first.status_code == 201 and first.content == b"paid" and first["Idempotency-Outcome"] == "claimed"
    assert again.content == b"paid" and again["Location"] == "/pay/1" and again["Idempotent-Replayed"] == "true"
    assert handler.runs == 1 and seen_outside == [([], None)]
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, key) == "replay"


def test_an_exception_rolls_back_the_write_and_frees_the_key(mode, handler, tenant):
    def boom(request, attempt):
        raise RuntimeError("boom after the write")
    handler.answer = writing(boom)
    c, key = client(), fresh_key()
    failed = post(c, tenant, key)
    assert failed.status_code == 500 and failed["Idempotency-Outcome"] == "claimed"
    assert writes(tenant) == [] and stored(tenant, key) is None
    handler.answer = writing()
    assert post(c, tenant, key)["Idempotency-Outcome"] == "claimed"
    assert writes(tenant) == [(key, "claimed")]


@pytest.mark.parametrize("status", [429, 503])
def test_a_retryable_answer_rolls_back_the_write(mode, handler, tenant, status):
    handler.answer = writing(lambda request, attempt: HttpResponse(b"later", status=status))
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == status
    assert writes(tenant) == [] and stored(tenant, key) is None
    handler.answer = writing()
    assert post(c, tenant, key, b'{"another": "body"}')["Idempotency-Outcome"] == "claimed"


def test_an_error_answer_commits_with_its_writes(mode, handler, tenant):
    handler.answer = writing(lambda request, attempt: HttpResponse(b"declined", status=402))
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 402
    again = post(c, tenant, key)
    assert again.status_code == 402 and again["Idempotent-Replayed"] == "true"
    assert writes(tenant) == [(key, "claimed")]


def test_unsettled_commits_the_write_and_the_claim(mode, settings, handler, tenant):
    use(settings, LEASE=1)

    def unsure(request, attempt):
        if attempt.recovered:
            return HttpResponse(b"reconciled", status=201)
        attempt.leave_unsettled()
        return HttpResponse(b"maybe", status=502)
    handler.answer = writing(unsure)
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 502
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, key) == "in_progress"
    expect_problem(post(c, tenant, key), 409, "request-in-progress")
    time.sleep(1.2)
    recovered = post(c, tenant, key)
    assert recovered.content == b"reconciled" and recovered["Idempotency-Outcome"] == "recovered"
    assert writes(tenant) == [(key, "claimed"), (key, "recovered")]


def test_unsettled_then_an_exception_still_commits(mode, handler, tenant):
    def unsure(request, attempt):
        attempt.leave_unsettled()
        raise RuntimeError("lost the provider's answer")
    handler.answer = writing(unsure)
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 500
    expect_problem(post(c, tenant, key), 409, "request-in-progress")
    if mode == "TRANSACTIONAL":
        assert writes(tenant) == [(key, "claimed")]
    else:
        # With ATOMIC_REQUESTS the exception rolled Django's own block (a savepoint) back, with the view's write;
        # the claim, in the middleware's transaction around it, committed as asked.
        assert writes(tenant) == []


def test_a_failed_commit_is_503_commit_failed(mode, handler, tenant):
    def twice(request, attempt):
        # Deferred: the duplicate is refused by COMMIT, after the answer was stored.
        with connections[attempt.using].cursor() as cursor:
            cursor.execute("INSERT INTO django_tx_guard VALUES (%s, 1), (%s, 1)", (tenant, tenant))
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(twice)
    c, key = client(), fresh_key()
    failed = post(c, tenant, key)
    assert failed.status_code == 503 and failed.content == COMMIT_FAILED and failed["Retry-After"] == "1"
    assert failed["Idempotency-Outcome"] == "claimed"
    assert writes(tenant) == [] and stored(tenant, key) is None
    handler.answer = writing()
    assert post(c, tenant, key)["Idempotency-Outcome"] == "claimed"


@pytest.fixture(scope="session")
def commit_kills_the_session(django_db_blocker):
    """A table whose deferred constraint trigger ends its own session at COMMIT (pg_terminate_backend of itself):
    the COMMIT's answer is FATAL 57P01 and a closed connection, and nothing is committed."""
    with django_db_blocker.unblock():
        with connections["default"].cursor() as cursor:
            cursor.execute("CREATE TABLE IF NOT EXISTS django_tx_commit_kill (tenant text NOT NULL)")
            cursor.execute("CREATE OR REPLACE FUNCTION django_tx_end_own_session() RETURNS trigger LANGUAGE "
                           "plpgsql AS $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$")
            cursor.execute("DROP TRIGGER IF EXISTS django_tx_end_own_session ON django_tx_commit_kill")
            cursor.execute("CREATE CONSTRAINT TRIGGER django_tx_end_own_session AFTER INSERT ON "
                           "django_tx_commit_kill DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "
                           "django_tx_end_own_session()")
        connections.close_all()


def test_a_commit_whose_answer_is_lost_is_503_commit_unknown(mode, handler, tenant, commit_kills_the_session,
                                                             caplog):
    def session_ends_at_commit(request, attempt):
        with connections[attempt.using].cursor() as cursor:
            cursor.execute("INSERT INTO django_tx_commit_kill VALUES (%s)", (tenant,))
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(session_ends_at_commit)
    c, key = client(), fresh_key()
    unknown = post(c, tenant, key)
    assert unknown.status_code == 503 and unknown.content == COMMIT_UNKNOWN and unknown["Retry-After"] == "1"
    assert unknown["Idempotency-Outcome"] == "claimed"
    assert "outcome of the commit of the 201 answer is unknown" in caplog.text
    handler.answer = writing()
    again = post(c, tenant, key)  # it did not commit: the retry runs afresh
    assert again.status_code == 201 and again["Idempotency-Outcome"] == "claimed" and "Idempotent-Replayed" not in again
    assert post(c, tenant, fresh_key()).status_code == 201  # the lost connection was replaced
    assert [row for row in writes(tenant) if row[0] == key] == [(key, "claimed")]


def test_unsettled_then_raised_on_a_lost_connection_committed_nothing(mode, handler, tenant, caplog):
    """The view left the key unsettled, then a statement of its saw the session end, and it raised: the COMMIT of
    the unsettled claim is never sent, and the server rolled the transaction back with the session. That is known,
    not unknown: the log says nothing was committed, and the retry runs afresh."""
    def unsure_then_lost(request, attempt):
        attempt.leave_unsettled()
        with connections[attempt.using].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    handler.answer = writing(unsure_then_lost)
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 500  # the view's exception, Django's 500 page
    assert ("the connection was lost before the COMMIT of the unsettled claim, which was not sent: nothing was "
            "committed") in caplog.text
    assert "is unknown" not in caplog.text
    handler.answer = writing()
    again = post(c, tenant, key)
    assert again.status_code == 201 and again["Idempotency-Outcome"] == "claimed"
    assert writes(tenant) == [(key, "claimed")]  # the retry's only


def test_unsettled_then_raised_after_a_failed_statement_says_nothing_was_done(settings, handler, tenant, tables,
                                                                             caplog):
    """The view left the key unsettled, a statement of its failed (caught), and then it raised: the transaction is
    aborted, so PostgreSQL answers the COMMIT of the unsettled claim with ROLLBACK and no error. The log says
    nothing was done, and the key is free."""
    use(settings, TRANSACTIONAL=True)

    def unsure_then_failed(request, attempt):
        attempt.leave_unsettled()
        try:
            with connections[attempt.using].cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
        except DatabaseError:
            pass
        raise RuntimeError("lost the provider's answer")
    handler.answer = writing(unsure_then_failed)
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 500
    assert "the transaction of the unsettled claim had failed, nothing was done" in caplog.text
    assert writes(tenant) == [] and stored(tenant, key) is None
    handler.answer = writing()
    assert post(c, tenant, key)["Idempotency-Outcome"] == "claimed"


@pytest.mark.parametrize("unsettled", [True, False], ids=["unsettled", "an answer to store"])
def test_a_connection_lost_before_the_commit_committed_nothing(settings, handler, tenant, tables, unsettled, caplog):
    """The view's statement saw its session end, and the view answered anyway: the server rolled the transaction
    back with the session, and the COMMIT is not sent. Unsettled (no answer to store, so straight to the COMMIT):
    503 commit-failed, as in every package. With an answer to store: 500 store-failed, as a finish on the lost
    connection would fail. (Under ATOMIC_REQUESTS Django's own block around the view raises on the lost
    connection first: the test above.)"""
    use(settings, TRANSACTIONAL=True)

    def answers_on_a_lost_session(request, attempt):
        try:
            with connections[attempt.using].cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        except DatabaseError:
            pass  # the view goes on regardless
        if unsettled:
            attempt.leave_unsettled()
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(answers_on_a_lost_session)
    c, key = client(), fresh_key()
    lost = post(c, tenant, key)
    if unsettled:
        assert lost.status_code == 503 and lost.content == COMMIT_FAILED and lost["Retry-After"] == "1"
    else:
        expect_problem(lost, 500, "store-failed")
    assert lost["Idempotency-Outcome"] == "claimed"
    what = "the unsettled 201 answer" if unsettled else "the 201 answer"
    assert f"the connection was lost before the COMMIT of {what}, which was not sent: nothing was committed" in (
        caplog.text)
    assert "is unknown" not in caplog.text
    handler.answer = writing()
    again = post(c, tenant, key)
    assert again.status_code == 201 and again["Idempotency-Outcome"] == "claimed"
    assert writes(tenant) == [(key, "claimed")]  # the retry's only


@pytest.mark.parametrize("error", [RuntimeError("the hook failed"), DatabaseError("the hook's query failed")],
                         ids=["RuntimeError", "DatabaseError"])
def test_an_on_commit_hook_that_raises_leaves_the_answer_committed(mode, handler, tenant, error, caplog):
    """Django runs on_commit hooks after the COMMIT and lets a hook's exception through: the request is committed,
    so its stored answer is the one to send."""
    def hooked(request, attempt):
        def hook():
            raise error
        transaction.on_commit(hook, using=attempt.using)
        return HttpResponse(b"paid", status=201, headers={"Location": "/pay/1"})
    handler.answer = writing(hooked)
    c, key = client(), fresh_key()
    first = post(c, tenant, key)
    assert first.status_code == 201 and first.content == b"paid" and first["Idempotency-Outcome"] == "claimed"
    assert "the 201 answer is committed, but an on_commit hook raised" in caplog.text
    again = post(c, tenant, key)
    assert again.content == b"paid" and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    assert writes(tenant) == [(key, "claimed")]


def test_an_answer_too_large_rolls_back_and_frees_the_key(mode, handler, tenant):
    big = b"x" * (1024 * 1024 + 1)
    handler.answer = writing(lambda request, attempt: HttpResponse(big, status=200))
    c, key = client(), fresh_key()
    expect_problem(post(c, tenant, key), 500, "store-failed")
    assert writes(tenant) == [] and stored(tenant, key) is None  # unlike the default mode: free at once
    handler.answer = writing()
    assert post(c, tenant, key)["Idempotency-Outcome"] == "claimed"


def test_a_failed_statement_is_store_failed(mode, handler, tenant):
    def fails(request, attempt):
        try:
            with connections[attempt.using].cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
        except DatabaseError:
            pass  # caught, but the transaction is aborted
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(fails)
    c, key = client(), fresh_key()
    reply = post(c, tenant, key)
    if mode == "TRANSACTIONAL":
        expect_problem(reply, 500, "store-failed")
    else:
        # Django's block around the view cannot release its savepoint: it rolls back to it and raises, and the
        # exception's 500 rolls everything back.
        assert reply.status_code == 500
    assert writes(tenant) == [] and stored(tenant, key) is None


def test_a_failed_orm_write_marks_the_transaction(mode, handler, tenant):
    """An ORM write that fails marks the innermost atomic block for rollback (Django's mark_for_rollback_on_error),
    even when the view catches the error. Under TRANSACTIONAL that block is the middleware's: nothing can commit,
    store-failed. Under ATOMIC_REQUESTS it is Django's block around the view, which rolls back to its savepoint
    at its end, as Django does for every view: the answer is then stored, and the view's write is gone."""
    def fails(request, attempt):
        try:
            with transaction.mark_for_rollback_on_error(using=attempt.using):
                with connections[attempt.using].cursor() as cursor:
                    cursor.execute("SELECT 1 / 0")
        except DatabaseError:
            pass
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(fails)
    c, key = client(), fresh_key()
    reply = post(c, tenant, key)
    if mode == "TRANSACTIONAL":
        expect_problem(reply, 500, "store-failed")
        assert stored(tenant, key) is None
    else:
        assert reply.status_code == 201 and stored(tenant, key) == "replay"
    assert writes(tenant) == []


def test_a_failed_statement_in_a_savepoint_is_fine(mode, handler, tenant):
    def savepoint(request, attempt):
        try:
            with transaction.atomic(using=attempt.using), connections[attempt.using].cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
        except DatabaseError:
            pass  # rolled back to the savepoint: the transaction goes on
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(savepoint)
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 201
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, key) == "replay"


def test_unsettled_after_a_failed_statement_is_commit_failed(mode, handler, tenant):
    def fails(request, attempt):
        attempt.leave_unsettled()
        try:
            with connections[attempt.using].cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
        except DatabaseError:
            pass
        return HttpResponse(b"maybe", status=502)
    handler.answer = writing(fails)
    c, key = client(), fresh_key()
    reply = post(c, tenant, key)
    if mode == "TRANSACTIONAL":
        expect_problem(reply, 503, "commit-failed")
        assert writes(tenant) == [] and stored(tenant, key) is None
    else:
        # Django's block rolled the view's work back to its savepoint and raised: the unsettled claim commits.
        assert reply.status_code == 500
        assert writes(tenant) == [] and stored(tenant, key) == "in_progress"


def test_a_view_that_commits_itself_is_store_failed(mode, handler, tenant):
    def commits(request, attempt):
        with connections[attempt.using].cursor() as cursor:
            cursor.execute("COMMIT")  # Django forbids transaction.commit() here; raw SQL gets through
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(commits)
    reply = post(client(), tenant, fresh_key())
    if mode == "TRANSACTIONAL":
        expect_problem(reply, 500, "store-failed")
    else:
        assert reply.status_code == 500  # Django's block lost its savepoint, and raised
    assert "Idempotent-Replayed" not in reply


def test_json_the_server_cannot_read_restarts_the_transaction(mode, handler, tenant):
    """The JSON claim fails (jsonb refuses the body) and aborts the transaction: it begins afresh and claims by
    the bytes, and the view's write commits in the new one."""
    handler.answer = writing()
    c, key = client(), fresh_key()
    body = b'{"a": "\\u0000"}'
    assert post(c, tenant, key, body).status_code == 201
    assert post(c, tenant, key, body)["Idempotent-Replayed"] == "true"
    expect_problem(post(c, tenant, key, b'{"a":"\\u0000"}'), 422, "key-reused")
    assert writes(tenant) == [(key, "claimed")] and handler.runs == 1


def test_a_duplicate_of_an_open_transaction_is_409_at_once(mode, handler, tenant):
    release = threading.Event()

    def slow(request, attempt):
        release.wait(10)
        return HttpResponse(b"done", status=201)
    handler.answer = writing(slow)
    key = fresh_key()
    first = in_thread(post, client(), tenant, key)
    started(handler)
    began = time.monotonic()
    busy = post(client(), tenant, key)
    took = time.monotonic() - began
    release.set()
    expect_problem(busy, 409, "request-in-progress")
    assert busy["Retry-After"] == "1" and took < 2, took  # never waits on the open transaction
    assert first.result().content == b"done"
    assert post(client(), tenant, key)["Idempotent-Replayed"] == "true"


def test_wait_gets_the_answer_once_committed(mode, settings, handler, tenant):
    use(settings, WAIT=5)

    def slow(request, attempt):
        time.sleep(0.5)
        return HttpResponse(b"done", status=201)
    handler.answer = writing(slow)
    key = fresh_key()
    first = in_thread(post, client(), tenant, key)
    started(handler)
    waited = post(client(), tenant, key)
    assert first.result().content == b"done"
    assert waited.content == b"done" and waited["Idempotent-Replayed"] == "true" and handler.runs == 1


def test_replays_and_refusals_write_nothing(mode, handler, tenant):
    handler.answer = writing()
    c, key = client(), fresh_key()
    post(c, tenant, key)
    assert post(c, tenant, key)["Idempotent-Replayed"] == "true"
    expect_problem(post(c, tenant, key, b'{"other": 1}'), 422, "key-reused")
    assert writes(tenant) == [(key, "claimed")]


def test_store_unavailable(settings, handler, tenant):
    use(settings, DATABASE="down", TRANSACTIONAL=True)
    reply = post(client(), tenant, fresh_key())
    expect_problem(reply, 503, "store-unavailable")
    assert handler.runs == 0


def test_atomic_requests_keeps_djangos_block_as_a_savepoint(settings, handler, tenant, tables):
    """With ATOMIC_REQUESTS the view runs in Django's atomic block, inside the middleware's transaction: a view
    (or DRF's exception handler) that marks it for rollback undoes its own writes, and its answer is still stored
    with the claim."""
    use(settings, DATABASE="atomic")

    def refuses(request, attempt):
        connection = connections[attempt.using]
        assert len(connection.atomic_blocks) == 2 and connection.savepoint_ids  # the middleware's, Django's
        write(request, attempt)
        transaction.set_rollback(True, using=attempt.using)  # what DRF does when it answers an APIException
        return HttpResponse(b"invalid", status=400)
    handler.answer = refuses
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 400
    again = post(c, tenant, key)
    assert again.status_code == 400 and again["Idempotent-Replayed"] == "true"
    assert writes(tenant) == [] and handler.runs == 1


def test_an_async_view_writes_in_the_transaction(settings, handler, tenant, tables):
    """The async view's database calls come back to the request's thread, so into its transaction: a retryable
    answer rolls its write back."""
    use(settings, TRANSACTIONAL=True)
    handler.answer = writing(lambda request, attempt: HttpResponse(b"later", status=503))
    c, key = client(), fresh_key()
    assert post(c, tenant, key, path="/async").status_code == 503
    assert writes(tenant) == []
    handler.answer = writing()
    assert post(c, tenant, key, path="/async").status_code == 201
    assert writes(tenant) == [(key, "claimed")]


def test_no_transaction_outside_the_mode(handler, tenant):
    seen = []
    handler.answer = lambda request, attempt: seen.append(
        (attempt.transactional, connections["default"].in_atomic_block)) or HttpResponse(status=204)
    post(client(), tenant, fresh_key())
    assert seen == [(False, False)]


def test_under_an_open_atomic_block_the_mode_refuses(settings, handler, tenant):
    """The request's transaction must be the middleware's own: its COMMIT is the one it answers for."""
    use(settings, TRANSACTIONAL=True)
    with transaction.atomic():
        with pytest.raises(RuntimeError, match="an atomic block is open there already"):
            post(Client(), tenant, fresh_key())  # this client raises what Django would answer with its 500
    assert handler.runs == 0


def test_under_a_testcase_the_json_restart_uses_a_savepoint(settings, handler, tenant, tables):
    """An application's tests in Django's TestCase run every request inside the test's transaction; the claim by
    bytes after a refused JSON body then rolls back to a savepoint instead of restarting that transaction."""
    use(settings, TRANSACTIONAL=True)
    handler.answer = writing()
    outer = transaction.atomic()
    outer._from_testcase = True  # what TestCase marks its own blocks with
    outer.__enter__()
    try:
        key = fresh_key()
        body = b'{"a": "\\u0000"}'
        assert post(client(), tenant, key, body).status_code == 201
        assert post(client(), tenant, key, body)["Idempotent-Replayed"] == "true"
        assert connections["default"].in_atomic_block  # the test's transaction is still open
    finally:
        outer.__exit__(Exception, Exception(), None)  # rolled back, as TestCase does
    assert writes(tenant) == [] and handler.runs == 1


def test_under_a_testcase_on_commit_callbacks_are_the_views_own(settings, handler, tenant, tables):
    """An application's test captures its view's on_commit callbacks inside the test's transaction, where nothing
    commits (TestCase.captureOnCommitCallbacks): it finds the view's, and none of the package's."""
    use(settings, TRANSACTIONAL=True)

    def views_hook():
        pass

    def hooked(request, attempt):
        transaction.on_commit(views_hook, using=attempt.using)
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(hooked)
    outer = transaction.atomic()
    outer._from_testcase = True  # what TestCase marks its own blocks with
    outer.__enter__()
    try:
        with TestCase.captureOnCommitCallbacks(using="default") as callbacks:
            assert post(client(), tenant, fresh_key()).status_code == 201
    finally:
        outer.__exit__(Exception, Exception(), None)  # rolled back, as TestCase does
    assert callbacks == [views_hook]


def test_after_each_request_the_connection_is_idle(mode, handler, tenant):
    """The middleware's transaction never outlives the request, whatever the outcome."""
    answers = [writing(), writing(lambda r, a: HttpResponse(status=503)), writing(lambda r, a: 1 / 0)]
    c = client()
    for answer in answers:
        handler.answer = answer
        post(c, tenant, fresh_key())
        for alias in ("default", "atomic"):
            assert not connections[alias].in_atomic_block
