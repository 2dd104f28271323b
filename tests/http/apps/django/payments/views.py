"""POST /payments and GET /payments/<id> (tests/http/README.md). With IDEM_TX=1 (ATOMIC_REQUESTS) the ORM work
below runs in the middleware's transaction, with the claim and the stored answer."""
import json
import logging
import re
import secrets
import time

from django.db import DatabaseError, connection, transaction
from django.http import JsonResponse

from .models import Payment
from .problems import problem

SLOW = re.compile(r"cus_slow_([0-9]{1,5})")
CRASH_AFTER_WRITE = re.compile(r"cus_crash_after_write_([0-9]{1,5})")
MAX_SLEEP_MS = 60000
log = logging.getLogger("payments")


def valid(pay):
    return (isinstance(pay, dict) and type(pay.get("amount")) is int and 0 < pay["amount"] < 2**63
            and isinstance(pay.get("currency"), str) and re.fullmatch(r"[A-Za-z]{3}", pay["currency"]) is not None
            and isinstance(pay.get("customer_id"), str) and pay["customer_id"] != "")


def create_payment(request):
    if request.method != "POST":
        return problem(405, "Method Not Allowed", "method-not-allowed", "POST only", {"Allow": "POST"})
    attempt = getattr(request, "idempotency", None)  # None with IDEM_OFF=1 and IDEM_PEER
    try:
        pay = json.loads(request.body)
    except ValueError:
        pay = None
    if not valid(pay):
        return problem(400, "Bad Request", "invalid-payment",
                       "amount (an integer > 0), currency (3 letters) and customer_id (a string) are required")
    customer = pay["customer_id"]
    slow = SLOW.fullmatch(customer)
    if slow:
        time.sleep(min(int(slow[1]), MAX_SLEEP_MS) / 1000)
    elif customer == "cus_fail_503":
        return problem(503, "Service Unavailable", "provider-unavailable", "the provider refused; nothing was charged",
                       {"Retry-After": "1"})
    elif customer == "cus_fail_402":
        return problem(402, "Payment Required", "card-declined", "the card was declined")
    elif customer == "cus_throw":
        raise RuntimeError("cus_throw: the view raises")
    elif customer == "cus_unsettled":
        if attempt:
            attempt.leave_unsettled()  # maybe charged: the next retry recovers the key and looks first
        return problem(502, "Bad Gateway", "provider-unreachable", "the provider did not answer: maybe charged")

    key = attempt.key if attempt else None
    payment = None
    if attempt and attempt.recovered:
        # The previous owner died (or outlived its lease) after its claim: it may have paid already.
        try:
            payment = Payment.objects.filter(tenant=request.tenant, idempotency_key=key).order_by("id").first()
        except DatabaseError as e:
            log.warning("payments lookup: %s", e)
            return problem(503, "Service Unavailable", "database-unavailable", "try again")
    if payment is None:
        try:
            # A savepoint in transactional mode: a failed insert leaves the request's transaction usable, and the
            # 503 below rolls it back with the claim.
            with transaction.atomic():
                payment = Payment.objects.create(tenant=request.tenant, idempotency_key=key, amount=pay["amount"],
                                                 currency=pay["currency"], customer_id=customer)
                if customer == "cus_commit_fails":
                    # Deferred: in a transaction the duplicate is refused by COMMIT, after the answer is stored.
                    with connection.cursor() as cursor:
                        cursor.execute("INSERT INTO commit_guard VALUES (1), (1)")
        except DatabaseError as e:
            # 503 releases the key (in transactional mode the insert is rolled back with it): the retry pays.
            log.warning("payments insert: %s", e)
            return problem(503, "Service Unavailable", "database-unavailable", "nothing was charged: try again",
                           {"Retry-After": "1"})
    if customer == "cus_throw_after_write":
        raise RuntimeError("cus_throw_after_write: the view raises after its insert")
    crash = CRASH_AFTER_WRITE.fullmatch(customer)
    if crash:
        # Time for a test to SIGKILL the app after the write and before the answer.
        time.sleep(min(int(crash[1]), MAX_SLEEP_MS) / 1000)
    body = {**payment.as_json(), "attempt": attempt.outcome if attempt else "claimed"}
    return JsonResponse(body, status=201, headers={"Location": f"/payments/{payment.id}",
                                                   "X-Request-Id": secrets.token_hex(8)})


def read_payment(request, payment_id):
    payment = Payment.objects.filter(id=payment_id, tenant=request.tenant).first()
    if payment is None:
        return problem(404, "Not Found", "payment-not-found", "no such payment for this tenant")
    return JsonResponse(payment.as_json())


def server_error(request):
    """Django's answer to an exception of the view (DEBUG off); the middleware names its outcome."""
    return problem(500, "Internal Server Error", "internal-error", "the handler failed")
