"""Utilities: ``lezero.utils.data`` (datasets and loaders)."""
from lezero.utils import data  # noqa: F401
