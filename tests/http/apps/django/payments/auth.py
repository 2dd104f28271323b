"""A stand-in for real authentication, before the idempotency middleware: the tenant from `Authorization: Bearer
<tenant>`, on the request, where the middleware's scope function reads it."""
import re

from .problems import problem

BEARER = re.compile(r"Bearer ([A-Za-z0-9_-]{1,64})")


class BearerTenant:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        bearer = BEARER.fullmatch(request.headers.get("Authorization", ""))
        if bearer is None:
            return problem(401, "Unauthorized", "unauthenticated", "Authorization: Bearer <tenant> is required",
                           {"WWW-Authenticate": "Bearer"})
        request.tenant = bearer[1]
        return self.get_response(request)


def tenant_of(request):
    return getattr(request, "tenant", None)
