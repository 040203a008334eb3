"""Review a workflow's pending tool calls by Update.

``python reviewer.py ID list [--wait]``: the calls waiting for approval (``--wait``: until
there is one). ``python reviewer.py ID approve|deny CALL_ID --reviewer NAME``: answer
one, bound to the digest the workflow shows for it. The workflow's validator rejects an
answer for a call that is not pending or for other arguments; nothing is recorded then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from common import connect, exit_now
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from agent_adapter.integrations.temporal import APPROVE_UPDATE, PENDING_QUERY


async def pending(handle: WorkflowHandle[Any, Any], *, wait: bool) -> list[dict[str, Any]]:
    """The Query's list; with ``wait``, asked again after each workflow task until it is
    not empty (gated on the workflow's history, a long poll, not on a timer)."""
    calls: list[dict[str, Any]] = await handle.query(PENDING_QUERY)
    if calls or not wait:
        return calls
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.HasField("workflow_task_completed_event_attributes"):
            calls = await handle.query(PENDING_QUERY)
            if calls:
                return calls
    return []  # the workflow closed


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflow_id")
    parser.add_argument("action", choices=["list", "approve", "deny"])
    parser.add_argument("call_id", nargs="?")
    parser.add_argument("--address", default="127.0.0.1:7233")
    parser.add_argument("--reviewer", default="")
    parser.add_argument("--reason", default="")
    parser.add_argument("--wait", action="store_true", help="list: wait for a pending call")
    options = parser.parse_args()
    client = await connect(options.address, "reviewer")
    handle = client.get_workflow_handle(options.workflow_id)
    try:
        calls = await pending(handle, wait=options.wait)
    except RPCError as exc:
        print(f"reviewer: cannot read {options.workflow_id}: {exc.message}", file=sys.stderr)
        return 1
    if options.action == "list":
        print(json.dumps(calls, sort_keys=True), flush=True)
        return 0
    if not options.call_id or not options.reviewer:
        print("reviewer: approve and deny take a CALL_ID and --reviewer NAME", file=sys.stderr)
        return 2
    shown = {call["call_id"]: call for call in calls}
    # The digest of the arguments this reviewer was shown: an answer for them only.
    digest = shown[options.call_id]["digest"] if options.call_id in shown else ""
    answer = {
        "call_id": options.call_id,
        "approved": options.action == "approve",
        "reviewer": options.reviewer,
        "reason": options.reason,
        "digest": digest,
    }
    try:
        await handle.execute_update(APPROVE_UPDATE, answer)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause)
        print(f"reviewer: not recorded: {message}", file=sys.stderr)
        return 1
    done = "approved" if answer["approved"] else "denied"
    print(f"{done} {options.call_id} as {options.reviewer}", flush=True)
    return 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
