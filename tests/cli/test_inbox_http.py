"""The approval inbox over plain HTTP: the token, the CSRF token, and what bad input gets."""

from __future__ import annotations

import http.client
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the inbox needs the web extra")
pytest.importorskip("uvicorn", reason="the inbox needs the web extra")

from _inbox import SECRET, events, pending_request, serving, token_file

from agent_adapter.cli import main


def request(
    url: str,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    body = urllib.parse.urlencode(form) if form is not None else None
    sent = dict(headers or {})
    if body is not None:
        sent["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, "the page has a CSRF field"
    return found.group(1)


def answers(recorded: list[Any]) -> list[tuple[str, bool, str, Any]]:
    return [
        (e.request_id, e.approved, e.reviewer, e.edits)
        for e in recorded
        if e.type == "approval.answered"
    ]


async def test_without_the_token_nothing_is_shown(tmp_path: Path) -> None:
    """No token, a wrong bearer token, a wrong cookie or a wrong ?token= get a bare 401:
    nothing of the inbox (no request id, no tool) and no cookie."""
    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    with serving(db, tokens) as url:
        tries = [
            request(url, "GET", "/"),
            request(url, "GET", "/", headers={"Authorization": "Bearer " + token + "x"}),
            request(url, "GET", "/", headers={"Cookie": "agent_adapter_inbox=nope"}),
            request(url, "GET", "/?token=nope"),
            request(url, "GET", "/sections?since=0"),
            request(url, "GET", "/inbox.js"),
        ]
        good = request(url, "GET", "/", headers={"Authorization": "Bearer " + token})
    assert [status for status, _, _ in tries] == [401] * 6
    assert [(request_id in body, "refund" in body, "set-cookie" in h) for _, h, body in tries] == [
        (False, False, False)
    ] * 6
    assert (good[0], request_id in good[2]) == (200, True)


async def test_the_printed_url_sets_a_cookie_and_drops_the_token(tmp_path: Path) -> None:
    """Opening `/?token=T` redirects to `/` with an HttpOnly, SameSite=Strict cookie that
    then opens the page; the redacted card is shown as "[redacted]", never its value."""
    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    with serving(db, tokens) as url:
        status, headers, _ = request(url, "GET", "/?token=" + token)
        cookie = headers["set-cookie"]
        page = request(url, "GET", "/", headers={"Cookie": cookie.split(";")[0]})
    assert (status, headers["location"]) == (303, "/")
    assert cookie.startswith(f"agent_adapter_inbox={token};")
    assert ("HttpOnly" in cookie, "SameSite=strict" in cookie) == (True, True)
    assert page[0] == 200
    assert (request_id in page[2], "[redacted]" in page[2], SECRET in page[2]) == (
        True,
        True,
        False,
    )
    assert page[1]["x-frame-options"] == "DENY"
    assert "script-src 'self'" in page[1]["content-security-policy"]


async def test_a_forged_or_missing_csrf_token_records_nothing(tmp_path: Path) -> None:
    """An approval with the right bearer token but no CSRF field, a forged one, or a
    foreign Origin is a 403 and records nothing; the same form with the page's CSRF
    token is recorded (200), with the reviewer's name."""
    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    form = {"action": "approve", "reviewer": "alice"}
    with serving(db, tokens) as url:
        csrf = csrf_of(request(url, "GET", "/", headers=auth)[2])
        path = f"/requests/{request_id}"
        refused = [
            request(url, "POST", path, headers=auth, form=form),
            request(url, "POST", path, headers=auth, form={**form, "csrf": "0" * 64}),
            request(
                url,
                "POST",
                path,
                headers={**auth, "Origin": "http://evil.example"},
                form={**form, "csrf": csrf},
            ),
            request(url, "POST", path, form={**form, "csrf": csrf}),  # no token at all
        ]
        before = answers(await events(db))
        done = request(url, "POST", path, headers=auth, form={**form, "csrf": csrf})
    assert [status for status, _, _ in refused] == [403, 403, 403, 401]
    assert "nothing was recorded" in refused[0][2]
    assert before == []
    assert done[0] == 200
    assert f"approved request {request_id} (refund, run run-1) as alice" in done[2]
    assert answers(await events(db)) == [(request_id, True, "alice", None)]


async def test_a_second_decision_unknown_id_and_bad_edit_are_refused(tmp_path: Path) -> None:
    """A second decision for one request says another reviewer got there first (409); an
    unknown id says so (404); an edit that does not fit the tool's schema, or is not
    JSON, is shown next to the field (422); none of these records anything."""
    db = tmp_path / "ledger.db"
    first = await pending_request(db, call_id="call-1")
    second = await pending_request(db, run_id="run-2", call_id="call-9")
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    with serving(db, tokens) as url:
        csrf = csrf_of(request(url, "GET", "/", headers=auth)[2])

        def post(request_id: str, **fields: str) -> tuple[int, str]:
            status, _, body = request(
                url, "POST", f"/requests/{request_id}", headers=auth, form={"csrf": csrf, **fields}
            )
            return status, body

        denied = post(first, action="deny", reviewer="bob", reason="too much")
        again = post(first, action="approve", reviewer="carol")
        unknown = post("no-such-request", action="approve", reviewer="carol")
        wrong_type = post(
            second,
            action="approve",
            reviewer="carol",
            args='{"order_id": "A1001", "amount_cents": "lots", "card": "[redacted]"}',
        )
        not_json = post(second, action="approve", reviewer="carol", args="{nope")
        nameless = post(second, action="approve", reviewer="  ")
        edited = post(
            second,
            action="approve",
            reviewer="carol",
            args='{"order_id": "A1001", "amount_cents": 2000, "card": "[redacted]"}',
        )
        recorded = answers(await events(db))
    assert denied[0] == 200
    assert again[0] == 409
    assert (
        f"another reviewer got there first: request {first} was already denied by bob" in again[1]
    )
    assert unknown[0] == 404
    assert "no approval request &#x27;no-such-request&#x27; in this ledger" in unknown[1]
    assert wrong_type[0] == 422
    assert re.search(
        r'<p class="field-error" data-field="args" role="alert">these arguments do not fit '
        r"refund: amount_cents: &#x27;lots&#x27; is not of type &#x27;integer&#x27;</p>",
        wrong_type[1],
    )
    assert (not_json[0], 'data-field="args"' in not_json[1]) == (422, True)
    assert "not valid JSON" in not_json[1]
    assert (nameless[0], 'data-field="reviewer"' in nameless[1]) == (422, True)
    # A valid edit is shown for confirmation first: still nothing recorded for it.
    assert edited[0] == 200
    assert "Confirm approval with these arguments" in edited[1]
    assert recorded == [(first, False, "bob", None)]


def test_serve_refuses_a_missing_file_or_one_that_is_not_a_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`approvals serve` on a missing file, or on a file that is not a ledger, exits 1
    with one line on stderr (and creates nothing); so does a missing token file."""
    not_ledger = tmp_path / "notes.txt"
    not_ledger.write_text("hello\n")
    results = []
    for argv in (
        ["--db", str(tmp_path / "missing.db")],
        ["--db", str(not_ledger)],
        ["--db", str(not_ledger), "--token-file", str(tmp_path / "none")],
    ):
        code = main(["approvals", "serve", "--port", "0", *argv])
        captured = capsys.readouterr()
        results.append((code, captured.out, captured.err))
    assert results == [
        (1, "", f"agent-adapter: error: {tmp_path / 'missing.db'}: no such file\n"),
        (1, "", f"agent-adapter: error: {not_ledger} is not a ledger (not an SQLite database)\n"),
        (1, "", f"agent-adapter: error: token file {tmp_path / 'none'}: no such file\n"),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


async def test_a_request_recorded_with_arguments_that_are_not_an_object_can_be_approved(
    tmp_path: Path,
) -> None:
    """A request whose recorded arguments are not a JSON object (an older or a damaged
    record) is approved as shown, without edits: the form's text as the page showed it
    is not taken for an edit."""
    from agent_adapter.ledger import ApprovalDeferred, SQLiteLedger

    db = tmp_path / "ledger.db"
    ledger = SQLiteLedger(str(db))
    await ledger.append(
        ApprovalDeferred(
            ts=1000.0,
            run_id="run-1",
            call_id="call-1",
            tool="refund",
            request_id="req-1",
            digest="0" * 64,
            args="[withheld: 2000000 bytes, over the size limit]",
        )
    )
    await ledger.close()
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    with serving(db, tokens) as url:
        page = request(url, "GET", "/", headers=auth)[2]
        shown = re.search(r'<textarea name="args"[^>]*>(.*?)</textarea>', page, flags=re.S)
        assert shown is not None
        import html

        status, _, body = request(
            url,
            "POST",
            "/requests/req-1",
            headers=auth,
            form={
                "csrf": csrf_of(page),
                "action": "approve",
                "reviewer": "alice",
                "args": html.unescape(shown.group(1)),
            },
        )
    assert (status, "approved request req-1 (refund, run run-1) as alice" in body) == (200, True)
    assert answers(await events(db)) == [("req-1", True, "alice", None)]


def test_the_page_names_a_database_url_without_its_password() -> None:
    """A ledger given as a URL (PostgreSQL, once it exists) is shown without its password."""
    from agent_adapter.cli._inbox import _label

    assert [
        _label("ledger.db"),
        _label("postgresql://bob:s3cret@db:5432/ledgers?schema=refunds"),
        _label("postgresql://db/ledgers"),
    ] == ["ledger.db", "postgresql://bob@db:5432/ledgers", "postgresql://db/ledgers"]


async def test_a_client_that_leaves_mid_form_is_quietly_dropped(tmp_path: Path) -> None:
    """A POST whose client closes the connection before its body is complete records
    nothing and prints nothing (the server's stderr stays empty; `serving` checks it),
    and the server answers the next request."""
    import socket

    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    with serving(db, tokens) as url:
        parts = urllib.parse.urlsplit(url)
        head = (
            f"POST /requests/{request_id} HTTP/1.1\r\n"
            f"Host: {parts.netloc}\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            "Content-Length: 4000\r\n\r\n"
            "action=approve&reviewer=al"
        )
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(head.encode())
        after = request(url, "GET", "/", headers={"Authorization": "Bearer " + token})
        recorded = answers(await events(db))
    assert (after[0], request_id in after[2]) == (200, True)
    assert recorded == []


async def test_an_edit_holding_a_lone_surrogate_is_refused_next_to_the_field(
    tmp_path: Path,
) -> None:
    """An Approve whose edited arguments hold a lone surrogate's escape (not yet
    confirmed, and confirmed) is a 422 page naming the problem at the field, never a
    500; nothing is recorded."""
    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    edit = '{"order_id": "\\ud800", "amount_cents": 2000, "card": "[redacted]"}'
    with serving(db, tokens) as url:
        csrf = csrf_of(request(url, "GET", "/", headers=auth)[2])
        tries = [
            request(
                url,
                "POST",
                f"/requests/{request_id}",
                headers=auth,
                form={"csrf": csrf, "action": "approve", "reviewer": "al", "args": edit, **extra},
            )
            for extra in ({}, {"confirmed": "1"})
        ]
        recorded = answers(await events(db))
    assert [status for status, _, _ in tries] == [422, 422]
    for _, _, body in tries:
        assert re.search(
            r'<p class="field-error" data-field="args" role="alert">the arguments hold a lone '
            r"surrogate",
            body,
        )
    assert recorded == []


async def test_a_forged_host_is_misdirected_even_with_a_matching_origin(tmp_path: Path) -> None:
    """DNS rebinding: a page of another site whose name resolves to 127.0.0.1 sends its
    own name as Host and as Origin; the server answers only to the names it is served
    at (421 otherwise, nothing recorded), and `localhost` still works."""
    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    with serving(db, tokens) as url:
        port = urllib.parse.urlsplit(url).port
        csrf = csrf_of(request(url, "GET", "/", headers=auth)[2])
        evil = f"evil.example:{port}"
        forged = [
            request(url, "GET", "/", headers={**auth, "Host": evil}),
            request(
                url,
                "POST",
                f"/requests/{request_id}",
                headers={**auth, "Host": evil, "Origin": f"http://{evil}"},
                form={"csrf": csrf, "action": "approve", "reviewer": "mallory"},
            ),
            request(url, "GET", "/", headers={**auth, "Host": f"127.0.0.1:{port}1"}),
        ]
        named = request(url, "GET", "/", headers={**auth, "Host": f"localhost:{port}"})
        recorded = answers(await events(db))
    assert [(status, request_id in body) for status, _, body in forged] == [(421, False)] * 3
    assert (named[0], request_id in named[2]) == (200, True)
    assert recorded == []


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path, port: str) -> None:
    """`approvals serve --port 99999` on a real ledger is refused in one line, exit 2 like
    any usage error, before anything listens (the socket layer would serve on
    99999 - 65536; a server that does times out here)."""
    import asyncio
    import subprocess
    import sys

    db = tmp_path / "ledger.db"
    asyncio.run(pending_request(db))
    argv = ["approvals", "serve", "--db", str(db), "--port", port]
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == (
        "agent-adapter approvals serve: error: argument --port: "
        f"{port} is not a port: give 0 to 65535 (0: any free one)"
    )
    assert "Traceback" not in done.stderr
