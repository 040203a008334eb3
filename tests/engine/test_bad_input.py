"""Bad input of any shape: a clear AdapterError or a value, and the ledger stays consistent."""

from __future__ import annotations

import asyncio
import enum
from typing import Any, Literal

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.errors import AdapterError
from agent_adapter.ledger import OUTCOME_TAGS, MemoryLedger


class Mode(enum.Enum):
    FAST = "fast"


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    x: int


def _registry() -> Registry:
    registry = Registry()

    @registry.tool(redact=["secret"])
    async def typed(
        n: int,
        f: float,
        s: str,
        secret: str = "",
        mode: Mode = Mode.FAST,
        inner: Inner | None = None,
    ) -> dict[str, Any]:
        return {"n": n}

    @registry.tool
    async def untyped(data: Any, opt: dict[str, Any] | None = None) -> Any:
        return data

    @registry.tool
    def literal(kind: Literal["a", "b"], items: list[int] = []) -> int:  # noqa: B006
        return len(items)

    registry.add_schema_tool(
        "schema",
        {
            "type": "object",
            "properties": {"q": {"type": "string"}, "k": {"type": "integer", "minimum": 0}},
            "required": ["q"],
            "additionalProperties": False,
        },
        lambda **kw: kw,
        redact=["q"],
    )
    return registry


weird_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=8)
    | st.sampled_from([Mode.FAST, Inner(x=1), object(), (1, 2), {1, 2}])
)
weird_values = st.recursive(
    weird_scalars,
    lambda c: (
        st.lists(c, max_size=3)
        | st.dictionaries(st.text(max_size=5) | st.integers(), c, max_size=3)
    ),
    max_leaves=10,
)
weird_args = (
    st.dictionaries(
        st.sampled_from(
            [
                "n",
                "f",
                "s",
                "secret",
                "mode",
                "inner",
                "data",
                "opt",
                "kind",
                "items",
                "q",
                "k",
                "zz",
            ]
        ),
        weird_values,
        max_size=5,
    )
    | st.text(max_size=60)
    | st.binary(max_size=30)
    | weird_values.map(lambda v: msgspec.json.encode(v, enc_hook=repr))
    | weird_values
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["typed", "untyped", "literal", "schema"]), weird_args),
        min_size=1,
        max_size=6,
    )
)
def test_any_input_gives_a_value_or_an_adapter_error(calls: list[tuple[str, Any]]) -> None:
    """Whatever the arguments, the caller gets a value or an AdapterError; one outcome per call."""
    registry = _registry()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)

    async def run() -> list[str]:
        kinds = []
        for i, (tool, args) in enumerate(calls):
            try:
                await executor.run_spec(
                    registry.get(tool), args, CallContext(run_id="r", call_id=f"c{i}")
                )
                kinds.append("ok")
            except AdapterError as exc:
                kinds.append(exc.kind)
        return kinds

    kinds = asyncio.run(run())
    assert len(kinds) == len(calls)
    outcomes = [r.type for r in ledger.records if r.type in OUTCOME_TAGS]
    assert (len(outcomes), asyncio.run(ledger.verify()).ok) == (len(calls), True)
    assert [o == "call.succeeded" for o in outcomes] == [k == "ok" for k in kinds]
