"""The MCP gateway: the executor in front of any MCP client, and of any MCP server.

``mcp_server(registry)`` is an MCP server (the official SDK's low-level ``Server``) whose
tools run through the executor's whole pipeline; ``proxy(registry, upstream)`` puts every
tool of an upstream MCP server behind it (an ``Upstream``: one connection per set of
capabilities its clients declared). The bridge decides nothing: ids, approvals and
errors are mapped onto ``Executor.run_spec``. Import it as
``agent_adapter.integrations.mcp`` (the documented path) or from here. Needs the ``mcp``
extra (``pip install 'agent-adapter[mcp]'``).
"""

from ._names import APPROVAL_SCHEMA, META_CALL_ID, META_KIND, META_RUN_ID, NAME
from ._policy import ToolPolicy, load_policy, parse_policy
from ._proxy import UpstreamError, proxy
from ._relay import Relay
from ._server import drain, exported_tools, mcp_server
from ._upstream import Upstream, UpstreamUnavailable
from ._wire import answering, answering_http

__all__ = [
    "APPROVAL_SCHEMA",
    "META_CALL_ID",
    "META_KIND",
    "META_RUN_ID",
    "NAME",
    "Relay",
    "ToolPolicy",
    "Upstream",
    "UpstreamError",
    "UpstreamUnavailable",
    "answering",
    "answering_http",
    "drain",
    "exported_tools",
    "load_policy",
    "mcp_server",
    "parse_policy",
    "proxy",
]
