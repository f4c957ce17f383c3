"""Tests of the ``asynctrace`` command line (a package, so module names do not clash)."""
