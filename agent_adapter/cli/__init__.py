"""The ``agent-adapter`` command: the demo, and tools for a ledger file.

A thin layer: the library decides (``replay``, ``verify``, ``DeferredApproval``,
``resolve_effect``), this package parses arguments, opens the file safely and prints.
Expected failures (a missing file, a file that is not a ledger, a locked or read-only
file, an unknown id) are one line on stderr and exit status 1, never a traceback, and
never a modified file: reading commands refuse to create a ledger that does not exist.

structlog is configured here and only here (``--log-format``, ``--log-level``): the
library never configures logging, its host does.
"""

from ._logging import configure_logging, log_hooks
from ._main import PROG, build_parser, main
from ._opening import CliError
from ._render import Style, event_details, event_json, render_audit, table, verification_line
from ._review import parse_edits

__all__ = [
    "PROG",
    "CliError",
    "Style",
    "build_parser",
    "configure_logging",
    "event_details",
    "event_json",
    "log_hooks",
    "main",
    "parse_edits",
    "render_audit",
    "table",
    "verification_line",
]
