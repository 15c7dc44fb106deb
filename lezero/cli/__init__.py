"""Command-line tools: lezero-opt (and later lezero-compile)."""
