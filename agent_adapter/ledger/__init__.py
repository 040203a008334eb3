"""The ledger: event types, the store protocol, stores, the hash chain, replay and audit."""

import typing

from ._audit import (
    ApprovalRecord,
    Audit,
    CallRecord,
    EffectRecord,
    EffectResolution,
    Problem,
    replay,
)
from ._chain import Record, Verification, chain_hash, check_chain, verify_records
from ._events import (
    EVENT_TAGS,
    OUTCOME_TAGS,
    ApprovalAnswered,
    ApprovalConsumed,
    ApprovalDeferred,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    CallAmbiguous,
    CallBlocked,
    CallCached,
    CallCancelled,
    CallDenied,
    CallDuplicate,
    CallFailed,
    CallInvalid,
    CallLimited,
    CallPending,
    CallReplayed,
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallTimedOut,
    CallValidated,
    EffectClaimed,
    EffectRenewed,
    EffectResolved,
    Event,
    GuardChecked,
    GuardVerdict,
    HookFailed,
    UnknownEvent,
    decode_event,
    encode_event,
)
from ._export import export_line, parse_export_line
from ._memory import MemoryLedger
from ._protocol import LOCK_TIMEOUT_S, Ledger

if typing.TYPE_CHECKING:
    # Loaded lazily at run time (``__getattr__`` below); imported here for type checkers,
    # which do not run ``__getattr__`` and would otherwise type SQLiteLedger as object.
    # (``typing.``, not a name imported from it: the package's public names stay its own.)
    from ._postgres import PostgresLedger
    from ._sqlite import SQLiteLedger

__all__ = [
    "ApprovalAnswered",
    "ApprovalConsumed",
    "ApprovalDeferred",
    "ApprovalGranted",
    "ApprovalRecord",
    "ApprovalRejected",
    "ApprovalRequested",
    "Audit",
    "CallAmbiguous",
    "CallBlocked",
    "CallCached",
    "CallCancelled",
    "CallDenied",
    "CallDuplicate",
    "CallFailed",
    "CallInvalid",
    "CallLimited",
    "CallPending",
    "CallRecord",
    "CallReplayed",
    "CallRequested",
    "CallStarted",
    "CallSucceeded",
    "CallTimedOut",
    "CallValidated",
    "EVENT_TAGS",
    "EffectClaimed",
    "EffectRecord",
    "EffectRenewed",
    "EffectResolution",
    "EffectResolved",
    "Event",
    "GuardChecked",
    "GuardVerdict",
    "HookFailed",
    "LOCK_TIMEOUT_S",
    "Ledger",
    "MemoryLedger",
    "OUTCOME_TAGS",
    "PostgresLedger",
    "Problem",
    "Record",
    "SQLiteLedger",
    "UnknownEvent",
    "Verification",
    "chain_hash",
    "check_chain",
    "decode_event",
    "encode_event",
    "export_line",
    "parse_export_line",
    "replay",
    "verify_records",
]


def __getattr__(name: str) -> object:
    # SQLiteLedger (sqlite3, worker threads) loads on first use, so that
    # `import agent_adapter.ledger` stays light.
    if name == "SQLiteLedger":
        from ._sqlite import SQLiteLedger

        return SQLiteLedger
    if name == "PostgresLedger":
        # asyncpg is an extra: importing it only here keeps the core installable without.
        from ._postgres import PostgresLedger

        return PostgresLedger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
