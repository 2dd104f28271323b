from django.urls import path, re_path

from . import views

urlpatterns = [
    path("decorated", views.decorated),
    path("decorated-tx", views.decorated_tx),
    path("decorated-atomic", views.decorated_atomic),
    path("decorated-atomic-default", views.decorated_atomic_default),
    path("drf", views.Payments.as_view()),
    path("drf-tx", views.TransactionalPayments.as_view()),
    path("drf-atomic", views.AtomicPayments.as_view()),
    path("drf-atomic-default", views.AtomicDefaultPayments.as_view()),
    path("async", views.async_endpoint),
    path("pay-exempt", views.exempt_endpoint),
    path("pay-exempt-drf", views.ExemptAPIView.as_view()),
    path("decorated-exempt", views.decorated_exempt),
    path("drf-exempt", views.ExemptPayments.as_view()),
    re_path(r"^(?P<rest>.*)$", views.endpoint),  # /pay and anything else: the middleware's
]
