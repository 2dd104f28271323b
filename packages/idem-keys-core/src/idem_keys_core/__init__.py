"""What idem-keys-asgi and idem-keys-django share, with no I/O and no framework: the key parser, the problem
answers, the SQL and what it is sent and answers, the reading of database errors, the option vocabulary and its
checks. Each framework package runs the statements on its own connections and answers in its own responses."""
from .attempt import Attempt
from .keys import MAX_KEY_LENGTH, parse_idempotency_key
from .problems import Problem
from .statements import Claim, Request, Statement

__all__ = ["Attempt", "Claim", "MAX_KEY_LENGTH", "Problem", "Request", "Statement", "parse_idempotency_key"]
__version__ = "0.1.0"
