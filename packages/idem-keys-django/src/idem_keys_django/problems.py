"""The answers the middleware makes itself (idem_keys_core's problems), as Django responses."""
from __future__ import annotations

from django.http import HttpResponse
from idem_keys_core import Problem


def respond(problem: Problem) -> HttpResponse:
    """The problem's exact bytes, status and header fields (Content-Type, Content-Length, Retry-After)."""
    response = HttpResponse(problem.body(), status=problem.status)
    for name, value in problem.header_fields():
        response[name] = value
    return response
