"""The answers the middleware sends itself: a problem, a replay of the stored answer, and the handler's answer
once its key is settled (each in one piece, with the outcome header when one is configured)."""
from __future__ import annotations

from idem_keys_core import Claim, Problem
from idem_keys_core.answers import replay_fields

from .asgi import Message, Send
from .options import Options


async def problem(options: Options, send: Send, problem: Problem, outcome: str | None = None) -> None:
    headers = _encoded(problem.header_fields())
    if outcome and options.outcome_header:
        headers.append((options.outcome_header, outcome.encode()))
    await _whole(send, problem.status, headers, problem.body())


async def replay(options: Options, send: Send, claim: Claim) -> None:
    body = claim.response or b""
    headers = _encoded(replay_fields(claim.headers))
    headers += [(b"content-length", str(len(body)).encode()), (b"idempotent-replayed", b"true")]
    if options.outcome_header:
        headers.append((options.outcome_header, claim.outcome.encode()))
    await _whole(send, claim.status_code, headers, body)


async def answer(options: Options, send: Send, start: Message, body: bytes, outcome: str) -> None:
    """The handler's own answer, held until now."""
    headers = list(start.get("headers", []))
    if options.outcome_header:
        headers.append((options.outcome_header, outcome.encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _whole(send: Send, status: int | None, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _encoded(fields: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in fields]
