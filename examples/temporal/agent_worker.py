"""The agent example's worker: ``python agent_worker.py --address HOST:PORT --ledger FILE``.

The client carries Temporal's OpenAI plugin, whose model provider here is a test model
(``ClerkModel``: no API key, no network); put your provider (or none: OpenAI's, with
``OPENAI_API_KEY``) in its place. One executor, on the SQLite ledger the workers share,
serves the tool activities. Prints ``agent worker ready`` once it polls.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from typing import Any

from agent_workflow import RefundClerk
from agents import Model, ModelResponse, Usage
from agents.testing import assistant_message, function_call
from common import connect, exit_now
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.testing import TestModelProvider
from worker import parse, serve


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


class ClerkModel(Model):
    """A test model that reads the conversation: look the order up, refund what the
    lookup said, then report the refund's output. Any worker answers a turn the same way."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        outputs = {
            _get(i, "call_id"): _get(i, "output")
            for i in items
            if _get(i, "type") == "function_call_output"
        }
        if "lookup-1" not in outputs:
            prompt = next(_get(i, "content") for i in items if _get(i, "role") == "user")
            order_id = re.search(r"order (\w+)", str(prompt)).group(1)  # type: ignore[union-attr]
            reply = [function_call("lookup_order", {"order_id": order_id}, call_id="lookup-1")]
        elif "refund-1" not in outputs:
            order = json.loads(outputs["lookup-1"])
            reply = [function_call("refund", order, call_id="refund-1")]
        else:
            reply = [assistant_message(f"Done: {outputs['refund-1']}")]
        return ModelResponse(output=reply, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def plugin() -> OpenAIAgentsPlugin:
    """The plugin with the test model: model calls run as activities of this worker."""
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
        model_provider=TestModelProvider(ClerkModel()),
    )


async def main() -> None:
    options = parse(__doc__.splitlines()[0], "agent-adapter-agent-example")
    plain = await connect(options.address, "agent worker")
    client = Client(plain.service_client, namespace=plain.namespace, plugins=[plugin()])
    await serve(client, options, RefundClerk, "agent worker ready")


if __name__ == "__main__":
    asyncio.run(main())
    exit_now(0)
