"""PostgreSQL ends the session under the middleware, as a restart or a failover does (here pg_terminate_backend
of the thread's connection, kept between requests by CONN_MAX_AGE, found by its application_name so no other
session is touched): new keys are answered 201 again at the next request or the one after, in both modes, in the
same thread. A dead connection costs at most one 503 store-unavailable: the package closes a connection it finds
broken, so the next request connects afresh, even where nothing runs Django's close_old_connections (Django's test
client does not); under a server, which runs it around every request, CONN_HEALTH_CHECKS finds it dead before it
is used, and no request fails. Every key answered 201 wrote exactly one row, every other none."""
import pytest
from django.db import close_old_connections, connections

from conftest import client, expect_problem, fresh_key, outside, post, writes
from test_middleware import use
from test_transactional import writing

ALIASES = {"persistent": "idem-django-persistent", "persistent_checked": "idem-django-checked"}


def as_a_server(c, *args, **kwargs):
    """A request as a WSGI or ASGI server makes it: Django's close_old_connections before and after (its
    request_started and request_finished signals, which the test client leaves out)."""
    close_old_connections()
    try:
        return post(c, *args, **kwargs)
    finally:
        close_old_connections()


@pytest.mark.parametrize("served_by", ["server", "test client"])
@pytest.mark.parametrize("alias", list(ALIASES))
@pytest.mark.parametrize("transactional", [False, True], ids=["default", "transactional"])
def test_new_keys_are_answered_again_after_the_session_ends(settings, handler, tenant, tables, alias, transactional,
                                                            served_by):
    send = as_a_server if served_by == "server" else post
    most_503s = 0 if (served_by, alias) == ("server", "persistent_checked") else 1
    use(settings, DATABASE=alias, TRANSACTIONAL=transactional)
    handler.answer = writing(transactional=transactional)
    c = client()
    assert send(c, tenant, fresh_key()).status_code == 201
    ended = outside("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s "
                    "AND datname = current_database()", (ALIASES[alias],))[0][0]
    assert ended == 1  # the thread's connection, kept since the first request
    answers = {}
    for _ in range(5):  # bounded: one 503 at most, then 201s
        key = fresh_key()
        answers[key] = send(c, tenant, key).status_code
        if list(answers.values())[-3:] == [201] * 3:
            break
    statuses = list(answers.values())
    assert statuses[-3:] == [201] * 3 and statuses.count(503) <= most_503s, statuses
    rows = [key for key, _ in writes(tenant)]
    for key, status in answers.items():
        assert rows.count(key) == (1 if status == 201 else 0), (key, status)


def test_the_server_still_away_is_503_not_500(settings, handler, tenant, tables):
    """Transactional mode, the session ended and the server not back yet: the claim fails on the dead
    connection, Django's atomic block closes it and then cannot connect again to restore autocommit. That second
    error is not the request's answer: it is 503 store-unavailable, nothing claimed, and once the server is
    back the next request is 201."""
    use(settings, DATABASE="persistent", TRANSACTIONAL=True)
    handler.answer = writing()
    c = client()
    assert post(c, tenant, fresh_key()).status_code == 201
    outside("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database()", (ALIASES["persistent"],))
    database = connections["persistent"].settings_dict
    port = database["PORT"]
    database["PORT"] = "1"  # the server away: nothing listens on port 1 of the loopback
    try:
        key = fresh_key()
        expect_problem(post(c, tenant, key), 503, "store-unavailable")
    finally:
        database["PORT"] = port
    assert post(c, tenant, fresh_key()).status_code == 201
    assert key not in [k for k, _ in writes(tenant)] and handler.runs == 2
