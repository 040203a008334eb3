"""What a client receives: a value as a result, every refusal as an ``isError`` result."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import msgspec

from ...errors import AdapterError, ApprovalPending
from ._names import META_KIND

__all__ = ["refusal", "success"]

_encode = msgspec.json.Encoder().encode


def success(value: Any) -> types.CallToolResult:
    """``structuredContent`` is the value (``{"result": value}`` when it is not an object),
    with a text block of the same JSON for clients that read only text."""
    structured = value if isinstance(value, dict) else {"result": value}
    text = _encode(structured).decode()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def refusal(error: AdapterError) -> types.CallToolResult:
    """An ``isError`` result: ``{"error": {"kind", "message"}}`` (plus ``request_id`` when
    pending), the kind in ``_meta`` and a ``"<kind>: <message>"`` text block.

    Every kind is a result, not a JSON-RPC error: the MCP server is the host boundary, and
    a refusal is a business outcome the client (and its model) should see. The kind is read
    from the error itself, so a kind added to the engine later needs no change here.
    """
    structured: dict[str, Any] = {"error": error.to_dict()}
    if isinstance(error, ApprovalPending):
        structured["request_id"] = error.request_id
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{error.kind}: {error.message}")],
        structured_content=structured,
        is_error=True,
        _meta={META_KIND: error.kind},
    )
