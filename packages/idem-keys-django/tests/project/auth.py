"""The tests' stand-in for authentication: the tenant from X-Tenant. A real app takes it from verified
credentials, never from a header the client chooses; for these tests, which tenant is what matters."""
from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication


class Authenticate:
    """Django middleware, before IdempotencyMiddleware: request.tenant."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.tenant = request.headers.get("X-Tenant") or None
        return self.get_response(request)


def tenant_of(request):
    return getattr(request, "tenant", None)


@dataclass
class Tenant:
    """DRF's request.user for a tenant (what a token authentication would give)."""
    tenant: str
    is_authenticated: bool = True


class TenantAuthentication(BaseAuthentication):
    """DRF authentication from X-DRF-Tenant, a header the middleware's Authenticate does not read: a scope that
    sees it ran after DRF's authentication."""

    def authenticate(self, request):
        tenant = request.META.get("HTTP_X_DRF_TENANT")
        return (Tenant(tenant), None) if tenant else None

    def authenticate_header(self, request):
        return "Tenant"


def drf_tenant_of(request):
    return getattr(request.user, "tenant", None)
