from django.db import models
from django.db.models.functions import Now


class Payment(models.Model):
    """The payments table (tests/http/README.md), made by wsgi.py at start like every sample app's."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.TextField()
    idempotency_key = models.TextField(null=True)
    amount = models.BigIntegerField()
    currency = models.TextField()
    customer_id = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        managed = False
        db_table = "payments"

    def as_json(self):
        return {"id": self.id, "tenant": self.tenant, "amount": self.amount, "currency": self.currency,
                "customer_id": self.customer_id}
