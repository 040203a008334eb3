"""The gateway's names on the wire: ``_meta`` keys, the approval form, the bridge's name."""

from __future__ import annotations

from typing import Any

__all__ = ["APPROVAL_SCHEMA", "META_CALL_ID", "META_KIND", "META_RUN_ID", "NAME"]

#: The bridge's name in ``Registry.tool(targets=...)`` and in request metadata.
NAME = "mcp"

# Reverse-DNS prefixed, as the spec asks of ``_meta`` keys that are not MCP's own.
#: A client pins the call id with this key, so the retry of a lost response is answered
#: from the ledger instead of running again.
META_CALL_ID = "io.agent-adapter/call-id"
#: A client groups calls into one run (limits, deferred approvals) with this key.
META_RUN_ID = "io.agent-adapter/run-id"
#: Every refusal carries its kind here (and in ``structuredContent``).
META_KIND = "io.agent-adapter/kind"

#: The form a person answers (DESIGN.md, "MCP gateway"): flat and primitive, as form-mode
#: elicitation requires, and it collects no secret.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approve"],
}
