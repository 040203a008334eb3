"""An upstream that never answers ``initialize`` while a file exists, else the test upstream.

Run as ``python _mcp_stuck_upstream.py GATE LOG``: while GATE exists it reads stdin until
the client closes it and answers nothing; otherwise it runs ``_mcp_upstream.py LOG``.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

gate, log = sys.argv[1], sys.argv[2]
if os.path.exists(gate):
    sys.stdin.buffer.read()
else:
    sys.argv = [str(Path(__file__).with_name("_mcp_upstream.py")), log]
    runpy.run_path(sys.argv[0], run_name="__main__")
