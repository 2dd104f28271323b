"""A URLconf that a middleware picks per request (request.urlconf, as Django allows): /pay goes to the view taken
out of ATOMIC_REQUESTS, where the project's URLconf sends it to the plain one."""
from django.urls import path

from . import views

urlpatterns = [path("pay", views.exempt_endpoint)]


class UseExemptUrls:
    """Django middleware, before IdempotencyMiddleware: this URLconf for a request with X-Exempt-Urls."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "X-Exempt-Urls" in request.headers:
            request.urlconf = __name__
        return self.get_response(request)
