"""The idem_keys contract over asyncpg, run by tests/drivers/run.sh: claimed; in_progress with retry_after; replay
with status, body and headers; mismatch; recovered after a short lease; an error's SQLSTATE.

asyncpg speaks the binary protocol and decodes a composite into a Record by its type's catalog entry, so
idem_result comes back whole and its fields are read by name: `r["outcome"]`, `r["response_bytes"]`.
Usage: asyncpg_contract.py URL
"""
import asyncio
import datetime
import json
import pathlib
import sys
import uuid

import asyncpg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from checklist import Checklist  # noqa: E402 (after the path it is found on)

CLAIM = "SELECT idem_claim($1, $2, $3::jsonb, lease => $4::interval)"
FINISH = "SELECT idem_finish($1, $2, $3, $4, $5::bytea, headers => $6::jsonb)"
BODY = '{"amount": 1000, "currency": "EUR"}'
ANSWER = b'{"charge_id":"ch_1", "amount":1000}'
RUN = uuid.uuid4().hex[:8]
checks = Checklist()
check = checks.check


async def claim(conn, key, body=BODY, lease=None):
    return await conn.fetchval(CLAIM, "asyncpg", key, body, lease)


async def main(url):
    a, b = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        first = await claim(a, f"{RUN}-pay")
        check("claimed: token and attempt 1 (idem_result decoded as a Record)",
              isinstance(first, asyncpg.Record) and first["outcome"] == "claimed" and first["token"]
              and first["attempt"] == 1, first)
        await a.execute(FINISH, "asyncpg", f"{RUN}-pay", first["token"], 201, ANSWER, '{"Location": "/ch_1"}')
        again = await claim(b, f"{RUN}-pay")
        check("replay: status, body byte for byte, headers",
              again["outcome"] == "replay" and again["status_code"] == 201 and again["response_bytes"] == ANSWER
              and json.loads(again["headers"]) == {"Location": "/ch_1"}, again)
        check("mismatch", (await claim(b, f"{RUN}-pay", '{"amount": 9999}'))["outcome"] == "mismatch")

        busy = await claim(a, f"{RUN}-busy", lease=datetime.timedelta(minutes=1))
        seen = await claim(b, f"{RUN}-busy")
        check("in_progress with retry_after",
              busy["outcome"] == "claimed" and seen["outcome"] == "in_progress" and seen["retry_after"] >= 1, seen)

        lapsed = await claim(a, f"{RUN}-lapsed", lease=datetime.timedelta(seconds=1))
        await asyncio.sleep(1.2)
        recovered = await claim(b, f"{RUN}-lapsed")
        check("recovered after a short lease: attempt 2, a new token",
              recovered["outcome"] == "recovered" and recovered["attempt"] == 2
              and recovered["token"] > lapsed["token"], recovered)

        try:
            await a.execute(FINISH, "asyncpg", f"{RUN}-busy", busy["token"] + 1000, 200, ANSWER, None)
            state = None
        except asyncpg.PostgresError as e:
            state = e.sqlstate
        check("an error's SQLSTATE: a finish by a token that does not own the key is 55000", state == "55000", state)
    finally:
        await a.close()
        await b.close()
    return checks.summary("asyncpg contract")


sys.exit(asyncio.run(main(sys.argv[1])))
