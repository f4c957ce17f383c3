"""Soak tests: long, bounded runs (nox -s soak); a package, so module names do not clash."""
