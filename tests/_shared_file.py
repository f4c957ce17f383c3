"""A second process appending to an output file: what two processes of one rank do."""

from __future__ import annotations

import textwrap

OTHER_PROCESS = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path
    logging.basicConfig(level=logging.WARNING, format="LOG %(message)s")
    from asynctrace._files import AppendFile
    out = AppendFile(Path(sys.argv[1]))
    out.write(b'{"who":"other"}\\n', 1)
    out.close()
    """
)
"""A script (``python -c OTHER_PROCESS PATH``) that appends one line to PATH and logs."""
