"""The WSGI application gunicorn serves (serve.sh). At start, as every sample app does, the payments and
commit_guard tables are made if they are missing, and with IDEM_PEER the peer's cache table (settings.py)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "payments.settings")
application = get_wsgi_application()


def create_tables():
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections, transaction

    # Apps starting side by side would race CREATE TABLE IF NOT EXISTS on the catalog (a unique violation): the
    # lock, held to the end of this transaction, lets one create them and the others find them.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('idem_keys sample app: payments table'))")
        cursor.execute("""CREATE TABLE IF NOT EXISTS payments (
            id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text, amount bigint NOT NULL,
            currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())""")
        # cus_commit_fails' two equal rows: refused at COMMIT in transactional mode, at once otherwise.
        cursor.execute("CREATE TABLE IF NOT EXISTS commit_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)")
        if settings.PEER:
            call_command("createcachetable")  # the database cache's table, as a deployment makes it
    connections.close_all()  # the request threads open their own


create_tables()
