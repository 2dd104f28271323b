"""The Idempotency-Key header as Django sees it: idem_keys_core's parser, on one value per header name."""
from __future__ import annotations

from idem_keys_core import parse_idempotency_key as parse_field


def parse_idempotency_key(value: str) -> str | None:
    """The key in the request's Idempotency-Key value, or None when it is malformed (idem_keys_core's grammar).

    Django sees one value per header name: the server has already joined repeated fields with commas
    (`one,two`), so a bare key with a comma is refused as the two fields it may have been; in a quoted key a comma
    is as good as any other character (two quoted fields join into `"one","two"`, which is malformed anyway).
    """
    if "," in value and not value.strip(" \t").startswith('"'):
        return None
    return parse_field(value)
