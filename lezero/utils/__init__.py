"""Utilities: ``lezero.utils.data`` (datasets and loaders)."""
from lezero.utils import data  # noqa: F401
# issue 15: fault-tolerant training (CheckpointManager)
from lezero.utils import checkpoint  # noqa: F401,E402
