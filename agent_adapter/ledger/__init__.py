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
from ._effect_keys import (
    AMBIGUOUS,
    COMMITTED,
    DEFAULT_LEASE_S,
    DEFAULT_SKEW_MARGIN_S,
    FREE,
    IN_FLIGHT,
    lease_live,
    lease_text,
    redecided,
    status_after_outcome,
    status_after_resolve,
)
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
    CallExchanged,
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
from ._follow import EffectTaken, Follow, appending
from ._memory import MemoryLedger
from ._protocol import LOCK_TIMEOUT_S, Ledger
from ._recordable import UnrecordableEvent, append_repaired, checked_clock, recordable
from ._recordable import text as recordable_text
from ._watch import ChainWatch

if typing.TYPE_CHECKING:
    # Loaded lazily at run time (``__getattr__`` below); imported here for type checkers,
    # which do not run ``__getattr__`` and would otherwise type SQLiteLedger as object.
    # (``typing.``, not a name imported from it: the package's public names stay its own.)
    from ._postgres import PostgresLedger
    from ._sqlite import SQLiteLedger

__all__ = [
    "AMBIGUOUS",
    "ApprovalAnswered",
    "ApprovalConsumed",
    "ApprovalDeferred",
    "ApprovalGranted",
    "ApprovalRecord",
    "ApprovalRejected",
    "ApprovalRequested",
    "Audit",
    "COMMITTED",
    "CallAmbiguous",
    "CallBlocked",
    "CallCached",
    "CallCancelled",
    "CallDenied",
    "CallDuplicate",
    "CallExchanged",
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
    "ChainWatch",
    "DEFAULT_LEASE_S",
    "DEFAULT_SKEW_MARGIN_S",
    "EVENT_TAGS",
    "EffectClaimed",
    "EffectRecord",
    "EffectRenewed",
    "EffectResolution",
    "EffectResolved",
    "EffectTaken",
    "Event",
    "FREE",
    "Follow",
    "GuardChecked",
    "GuardVerdict",
    "HookFailed",
    "IN_FLIGHT",
    "LOCK_TIMEOUT_S",
    "Ledger",
    "MemoryLedger",
    "OUTCOME_TAGS",
    "PostgresLedger",
    "Problem",
    "Record",
    "SQLiteLedger",
    "UnknownEvent",
    "UnrecordableEvent",
    "Verification",
    "append_repaired",
    "appending",
    "chain_hash",
    "check_chain",
    "checked_clock",
    "decode_event",
    "encode_event",
    "export_line",
    "lease_live",
    "lease_text",
    "parse_export_line",
    "recordable",
    "recordable_text",
    "redecided",
    "replay",
    "status_after_outcome",
    "status_after_resolve",
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
