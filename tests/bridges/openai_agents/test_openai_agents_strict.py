"""Strict schemas with defaults: ours is the SDK's own, and a real run fills omitted defaults."""

from __future__ import annotations

import copy
import dataclasses
import enum
from typing import Any

import msgspec
import pytest
from agents import Runner
from agents.function_schema import function_schema
from agents.strict_schema import ensure_strict_json_schema
from openai_agents_helpers import CONFIG, assistant_message, function_call, make_agent, outputs

from agent_adapter import Executor, Registry, digest
from agent_adapter.integrations.openai_agents import function_tool
from agent_adapter.ledger import (
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    Event,
    MemoryLedger,
)


class Speed(enum.Enum):
    SLOW = "slow"
    FAST = "fast"


@dataclasses.dataclass
class Address:
    city: str
    zip: str = "00000"


class Parcel(msgspec.Struct, forbid_unknown_fields=True):
    weight_g: int
    service: str = "standard"


def ship(order_id: str, quantity: int, express: bool = False) -> str:
    """Ship an order."""
    return "ok"


def note(order_id: str, memo: str | None = None, tags: list[str] = [], rate: float = 1.5) -> str:  # noqa: B006
    """Leave a note."""
    return "ok"


def deliver(order_id: str, to: Address, when: Address | None = None) -> str:
    """Deliver to an address whose zip has a default."""
    return "ok"


def post(parcel: Parcel, speed: Speed = Speed.SLOW) -> str:
    """Post a parcel (a msgspec Struct, which the SDK's pydantic cannot describe)."""
    return "ok"


def _untitled(schema: Any) -> Any:
    """A JSON Schema without pydantic's generated ``title`` keywords (never a property name)."""
    if isinstance(schema, list):
        return [_untitled(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        elif key == "default":
            out[key] = value
        else:
            out[key] = _untitled(value)
    return out


@pytest.mark.parametrize("fn", [ship, note, deliver])
def test_the_strict_schema_is_the_sdk_function_tool_s(fn: Any) -> None:
    """For a signature with defaults, ours equals the SDK's @function_tool schema (titles aside).

    Every property required, a real default kept beside its type, a null one dropped,
    nested dataclass fields alike; and the bridge exports it strict, as is.
    """
    spec = Registry().tool(fn)
    sdk = function_schema(fn)
    assert sdk.strict_json_schema is True
    ours = spec.strict_schema()
    assert ours is not None
    assert _untitled(ours) == _untitled(sdk.params_json_schema)
    tool = function_tool(spec, executor=Executor())
    assert (tool.strict_json_schema, tool.params_json_schema) == (True, ours)


@pytest.mark.parametrize("fn", [ship, note, deliver, post])
def test_the_sdk_converter_leaves_our_strict_schema_as_it_is(fn: Any) -> None:
    """The SDK's ensure_strict_json_schema maps our full schema to our strict one, and that
    to itself (so FunctionTool's own conversion sends the model exactly our schema)."""
    spec = Registry().tool(fn)
    ours = spec.strict_schema()
    assert ours is not None
    assert ensure_strict_json_schema(copy.deepcopy(spec.json_schema)) == ours
    assert ensure_strict_json_schema(copy.deepcopy(ours)) == ours
    assert function_tool(spec, executor=Executor()).strict_json_schema is True


def _chainless(events: list[Event]) -> list[Event]:
    for event in events:
        event.prev = event.hash = ""
    return events


async def test_a_run_calls_ship_with_and_without_express(clock: Any) -> None:
    """Runner.run with ScriptedModel: the model is shown the strict schema; a call that omits
    ``express`` validates and runs with the default, one that sends it runs with its value."""
    registry = Registry()
    ran: list[dict[str, Any]] = []

    @registry.tool
    async def ship(order_id: str, quantity: int, express: bool = False) -> str:
        """Ship an order."""
        ran.append({"order_id": order_id, "quantity": quantity, "express": express})
        return f"shipped {quantity} of {order_id}" + (" express" if express else "")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    agent, model = make_agent(
        [function_tool(ship, executor=executor)],
        # One call per turn: the ledger's order is then the calls' order, not the tasks'.
        [function_call("ship", {"order_id": "A1", "quantity": 2}, call_id="c1")],
        [function_call("ship", {"order_id": "A2", "quantity": 1, "express": True}, call_id="c2")],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "go", run_config=CONFIG, context={"run_id": "r1"})

    assert result.final_output == "done"
    assert model.last_call is not None
    [shown] = model.last_call.tools
    assert (shown.name, shown.strict_json_schema, shown.params_json_schema) == (  # type: ignore[union-attr]
        "ship",
        True,
        {
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "quantity": {"type": "integer"},
                "express": {"type": "boolean", "default": False},
            },
            "required": ["order_id", "quantity", "express"],
            "additionalProperties": False,
        },
    )
    assert outputs(model) == {"c1": "shipped 2 of A1", "c2": "shipped 1 of A2 express"}
    assert ran == [
        {"order_id": "A1", "quantity": 2, "express": False},
        {"order_id": "A2", "quantity": 1, "express": True},
    ]

    events = _chainless([e async for e in ledger.read()])
    meta = {"integration": "openai_agents"}
    expected: list[Event] = []
    for call_id, raw, args, value in (
        # The model's own text: c1 leaves express out, the ledger shows it as sent.
        ("c1", '{"order_id":"A1","quantity":2}', ran[0], "shipped 2 of A1"),
        ("c2", '{"order_id":"A2","quantity":1,"express":true}', ran[1], "shipped 1 of A2 express"),
    ):
        common = {"ts": clock.now, "run_id": "r1", "call_id": call_id, "tool": "ship"}
        seq = len(expected)
        expected += [
            CallRequested(seq=seq + 1, **common, args=raw, metadata=meta),
            CallValidated(seq=seq + 2, **common, digest=digest(args)),
            CallStarted(seq=seq + 3, **common, digest=digest(args)),
            CallSucceeded(seq=seq + 4, **common, result=value),
        ]
    assert events == expected
