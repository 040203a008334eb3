"""The tools the conformance suite's server scenarios call that a registry can offer.

For ``agent-adapter mcp serve --tools _conformance_tools:registry`` in test_mcp_node.py:
text, an error, a JSON Schema 2020-12 input schema kept as it is. (Images, audio,
embedded resources, logging, progress, sampling and elicitation mid-call are what an
upstream sends; a registry tool returns a value. Those scenarios run through the proxy.)
"""

from __future__ import annotations

from typing import Any

from agent_adapter import Registry

registry = Registry()


@registry.tool(readonly=True)
def test_simple_text() -> str:
    """Tests simple text content response."""
    return "This is a simple text response for testing."


@registry.tool
def test_error_handling() -> str:
    """Tests error response handling."""
    raise RuntimeError("This tool intentionally returns an error for testing")


SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
    },
    "additionalProperties": False,
}


def _json_schema_2020_12_tool(**args: Any) -> str:
    return f"JSON Schema 2020-12 tool called with: {args}"


registry.add_schema_tool(
    "json_schema_2020_12_tool",
    SCHEMA_2020_12,
    _json_schema_2020_12_tool,
    description="Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
    readonly=True,
)
