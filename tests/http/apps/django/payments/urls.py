from django.urls import path

from . import views

urlpatterns = [
    path("payments", views.create_payment),
    path("payments/<int:payment_id>", views.read_payment),
]
handler500 = "payments.views.server_error"
