import json

from django.http import HttpResponse


def problem(status, title, code, detail, headers=None):
    """The app's own errors, in the same problem+json shape as the middleware's."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "code": code}
    return HttpResponse(json.dumps(body), status=status, content_type="application/problem+json", headers=headers)
