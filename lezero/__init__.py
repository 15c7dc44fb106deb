"""lezero."""
