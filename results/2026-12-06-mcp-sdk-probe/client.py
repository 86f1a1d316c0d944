"""Run the probe's steps with the MCP Python SDK 2.3.0 client.

Usage: python client.py URL MODE [HTTP_LOG]
MODE is legacy, auto or 2026-07-28 (the SDK's Client(mode=...)).
Prints one line per step: STEP name PASS|FAIL detail (`listen` only where the connection ended on
2026-07-28, `revision` only in the modes that negotiate)
If HTTP_LOG is given, every HTTP exchange (method, request headers and body, status, response
headers, and the body of every non-2xx or JSON answer: not of event streams) is appended to it.
"""

import json
import sys
import traceback

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

STEP_TIMEOUT = 20.0


def line(name: str, ok: bool, detail: str) -> None:
    detail = " ".join(str(detail).split())[:400]
    print(f"STEP {name} {'PASS' if ok else 'FAIL'} {detail}", flush=True)


def err(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(err(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


async def main() -> int:
    url, mode = sys.argv[1], sys.argv[2]
    log_path = sys.argv[3] if len(sys.argv) > 3 else None
    log = open(log_path, "a") if log_path else None

    def note(s: str) -> None:
        if log:
            log.write(s + "\n")
            log.flush()

    async def on_request(req: httpx2.Request) -> None:
        hdrs = {k: v for k, v in req.headers.items() if k.lower().startswith("mcp") or k.lower() in ("accept", "content-type", "last-event-id")}
        body = req.content.decode("utf-8", "replace") if req.method == "POST" else ""
        note(f">>> {req.method} {req.url} {json.dumps(hdrs)} {body[:600]}")

    async def on_response(resp: httpx2.Response) -> None:
        hdrs = {k: v for k, v in resp.headers.items() if k.lower().startswith("mcp") or k.lower() == "content-type"}
        text = ""
        if resp.status_code >= 300 or resp.headers.get("content-type", "").startswith("application/json"):
            await resp.aread()
            text = resp.text[:600]
        note(f"<<< {resp.status_code} {json.dumps(hdrs)} {text}")

    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(10.0, read=30.0),
        event_hooks={"request": [on_request], "response": [on_response]},
    )
    progress: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(p)

    fails = 0
    state = {"connected": False}
    steps_all = ("list_tools", "call_add", "progress", "read_resource", "get_prompt")
    done: set[str] = set()
    client = Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=STEP_TIMEOUT, cache=None)
    note(f"=== {mode} {url}")

    async def step(name, fn):
        nonlocal fails
        note(f"--- step {name}")
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                ok, detail = await fn()
        except Exception as e:  # noqa: BLE001
            ok, detail = False, err(e)
        if not ok:
            fails += 1
        done.add(name)
        line(name, ok, detail)

    async def list_tools():
        r = await client.list_tools()
        names = sorted(t.name for t in r.tools)
        return ("add" in names and "slow_steps" in names), f"tools={names}"

    async def call_add():
        r = await client.call_tool("add", {"a": 2, "b": 3})
        text = " ".join(getattr(c, "text", "") for c in r.content)
        return (not r.is_error and "5" in text), f"isError={r.is_error} content={text!r}"

    async def call_progress():
        r = await client.call_tool("slow_steps", {}, progress_callback=on_progress)
        text = " ".join(getattr(c, "text", "") for c in r.content)
        ok = (not r.is_error) and text == "done" and len(progress) == 2
        return ok, f"result={text!r} progress_notifications={len(progress)}/2"

    async def read_resource():
        r = await client.read_resource("probe://greeting")
        text = " ".join(getattr(c, "text", "") for c in r.contents)
        return text == "hello from the probe", f"text={text!r}"

    async def get_prompt():
        r = await client.get_prompt("review", {"topic": "the gateway"})
        text = " ".join(getattr(m.content, "text", "") for m in r.messages)
        return "the gateway" in text, f"messages={len(r.messages)} text={text!r}"

    async def listen():
        with anyio.fail_after(8):
            async with client.listen(tools_list_changed=True) as sub:
                honored = getattr(sub, "honored", None)
        return True, f"acknowledged honored={honored}"

    try:
        with anyio.fail_after(STEP_TIMEOUT * 8):
            async with client:
                state["connected"] = True
                line("connect", True, f"protocol_version={client.protocol_version}")
                await step("list_tools", list_tools)
                await step("call_add", call_add)
                await step("progress", call_progress)
                await step("read_resource", read_resource)
                await step("get_prompt", get_prompt)
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    # subscriptions/listen exists on 2026-07-28 only: opened, acknowledged, closed.
                    await step("listen", listen)
                if mode != "legacy":
                    line("revision", True, f"ended_on={client.protocol_version}")
    except BaseException as e:  # noqa: BLE001
        note("error: " + "".join(traceback.format_exception(e))[-2000:])
        if not state["connected"]:
            line("connect", False, err(e))
            if mode != "legacy":
                line("revision", False, "not connected")
        for s in steps_all:
            if s not in done:
                line(s, False, "not run: " + err(e))
        fails += 1
    await http.aclose()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
