"""The app's send while it runs: the answer is held until it is complete, then handed on whole."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from .asgi import Message


class Capture:
    """Holds the app's answer until its last message, then calls `complete(start, body)` from inside that last
    send, so whatever the app does after its answer (background tasks) runs after the client has it, as without
    the middleware. Anything the app sends after that is dropped."""

    def __init__(self, complete: Callable[[Message, bytes], Awaitable[None]]) -> None:
        self._complete = complete
        self._start: Message | None = None
        self._body: list[bytes] = []
        self.settled = False

    @property
    def started(self) -> bool:
        return self._start is not None

    async def send(self, message: Message) -> None:
        if self.settled:
            return
        if message["type"] == "http.response.start":
            self._start = message
        elif message["type"] == "http.response.body" and self._start is not None:
            self._body.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                self.settled = True
                await self._complete(self._start, b"".join(self._body))
