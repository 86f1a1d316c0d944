"""Run a fixed list of MCP steps with the MCP Python SDK 2.3.0 client, and say how each went.

Usage:
  python sdk_client.py [--profile probe|everything] MODE URL               # Streamable HTTP
  python sdk_client.py [--profile probe|everything] MODE --stdio CMD [ARG...]  # a server it starts on stdio

MODE is the SDK's Client(mode=...): legacy (initialize, 2025-11-25), auto (server/discover, then
initialize if refused) or 2026-07-28 (adopted without a request). The profile names the server:
  probe       sdk_server.py: tools add, slow_steps, confirm; resource probe://greeting; prompt review
  everything  @modelcontextprotocol/server-everything 2026.8.31 (2025-11-25 only): tools get-sum,
              trigger-long-running-operation, trigger-elicitation-request; resource
              demo://resource/dynamic/text/1; prompt args-prompt

One line per step, always in this order and always printed (FAIL "not run: ..." or "cut short: ..."
when the session broke before or during the step): STEP name PASS|FAIL detail, for
  connect list_tools call_add progress read_resource get_prompt input_required listen revision
`listen` only where the connection is on 2026-07-28 (or, unconnected, MODE is 2026-07-28);
`revision` (ended_on=VERSION) in every mode but legacy. input_required calls a tool that asks the
client a question, answered by this client's elicitation callback: on 2025-11-25 it must come as a
server-to-client elicitation/create request, on 2026-07-28 as an input_required result that the
client retries with the answer. Each step is bounded by 20 s, the whole run by 100 s.
Exit status 0 when every printed step passed, else 1.
"""

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

STEP_TIMEOUT = 20.0
LISTEN_TIMEOUT = 8.0
RUN_DEADLINE = 100.0


@dataclass
class Profile:
    tools: list[str]  # must all be listed
    add: tuple[str, dict, str]  # tool, arguments, text the result contains
    progress: tuple[str, dict, int]  # tool, arguments, progress notifications expected
    resource: tuple[str, str]  # uri, text the contents start with
    prompt: tuple[str, dict, str]  # name, arguments, text the messages contain
    ask: tuple[str, dict, dict, str]  # tool, arguments, the client's answer, text the result contains


PROFILES = {
    "probe": Profile(
        tools=["add", "slow_steps", "confirm"],
        add=("add", {"a": 2, "b": 3}, "5"),
        progress=("slow_steps", {}, 2),
        resource=("probe://greeting", "hello from the probe"),
        prompt=("review", {"topic": "the gateway"}, "the gateway"),
        ask=("confirm", {"question": "Proceed?"}, {"confirmed": True, "note": "from sdk_client"},
             "confirmed=True note=from sdk_client"),
    ),
    "everything": Profile(
        tools=["echo", "get-sum", "trigger-long-running-operation", "trigger-elicitation-request"],
        add=("get-sum", {"a": 2, "b": 3}, "is 5"),
        progress=("trigger-long-running-operation", {"duration": 0.2, "steps": 2}, 2),
        resource=("demo://resource/dynamic/text/1", "Resource 1:"),
        prompt=("args-prompt", {"city": "Paris"}, "Paris"),
        ask=("trigger-elicitation-request", {}, {"name": "sdk client", "check": True}, "Name: sdk client"),
    ),
}


@dataclass
class Run:
    printed: dict[str, bool] = field(default_factory=dict)  # step -> passed
    current: str = "connect"  # the step under way
    asked: list[str] = field(default_factory=list)  # how each elicitation reached the callback

    def line(self, name: str, ok: bool, detail: Any) -> None:
        detail = " ".join(str(detail).split())[:400]
        print(f"STEP {name} {'PASS' if ok else 'FAIL'} {detail}", flush=True)
        self.printed[name] = ok


def err(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(err(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def text_of(blocks) -> str:
    return " ".join(getattr(b, "text", "") for b in blocks)


async def main(mode: str, server: str | StdioServerParameters, profile: Profile) -> int:
    run = Run()
    progress: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(p)

    async def on_elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams):
        run.asked.append(f"message={getattr(params, 'message', '')!r}")
        return types.ElicitResult(action="accept", content=profile.ask[2])

    client = Client(server, mode=mode, read_timeout_seconds=STEP_TIMEOUT, cache=None, elicitation_callback=on_elicit)

    async def step(name, fn):
        run.current = name
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                ok, detail = await fn()
        except TimeoutError:
            ok, detail = False, f"timed out after {STEP_TIMEOUT:.0f} s"
        except Exception as e:  # noqa: BLE001
            ok, detail = False, err(e)
        run.line(name, ok, detail)

    async def list_tools():
        names = sorted(t.name for t in (await client.list_tools()).tools)
        missing = [t for t in profile.tools if t not in names]
        return not missing, f"missing={missing} tools={names}"

    async def call_add():
        tool, args, want = profile.add
        r = await client.call_tool(tool, args)
        return (not r.is_error and want in text_of(r.content)), f"isError={r.is_error} content={text_of(r.content)!r}"

    async def call_progress():
        tool, args, want = profile.progress
        r = await client.call_tool(tool, args, progress_callback=on_progress)
        ok = not r.is_error and len(progress) == want
        return ok, f"progress_notifications={len(progress)}/{want} isError={r.is_error} result={text_of(r.content)!r}"

    async def read_resource():
        uri, want = profile.resource
        text = text_of((await client.read_resource(uri)).contents)
        return text.startswith(want), f"text={text!r}"

    async def get_prompt():
        name, args, want = profile.prompt
        r = await client.get_prompt(name, args)
        text = text_of(m.content for m in r.messages)
        return want in text, f"messages={len(r.messages)} text={text!r}"

    async def input_required():
        # Round one by hand, to see how the question comes: an InputRequiredResult (2026-07-28), or
        # an elicitation/create request to the callback while the call is open (2025-11-25).
        tool, args, _, want = profile.ask
        first = await client.session.call_tool(tool, args, allow_input_required=True)
        if isinstance(first, types.InputRequiredResult):
            keys = sorted(first.input_requests or {})
            responses = {}
            for key, req in (first.input_requests or {}).items():
                ctx = ClientRequestContext(session=client.session, request_id=key)
                responses[key] = await client.session.dispatch_input_request(ctx, req)
            # The retry; any further rounds are the SDK's own input_required driver.
            result = await client.call_tool(tool, args, input_responses=responses, request_state=first.request_state)
            via, expected = f"input_required(keys={keys})", client.protocol_version in MODERN_PROTOCOL_VERSIONS
        else:
            result = first
            via = "elicitation/create request" if run.asked else "no question"
            expected = bool(run.asked) and client.protocol_version not in MODERN_PROTOCOL_VERSIONS
        text = text_of(result.content)
        ok = expected and len(run.asked) == 1 and not result.is_error and want in text
        return ok, f"via={via} asked={len(run.asked)} {'; '.join(run.asked)} result={text!r}"

    async def listen():
        with anyio.fail_after(LISTEN_TIMEOUT):
            async with client.listen(tools_list_changed=True) as sub:
                honored = sub.honored
        return True, f"acknowledged honored={honored}"

    error, version = "", mode  # the version the client is on, once connected
    with anyio.move_on_after(RUN_DEADLINE) as deadline:
        try:
            async with client:
                version = client.protocol_version
                run.line("connect", True, f"protocol_version={version}")
                await step("list_tools", list_tools)
                await step("call_add", call_add)
                await step("progress", call_progress)
                await step("read_resource", read_resource)
                await step("get_prompt", get_prompt)
                await step("input_required", input_required)
                if version in MODERN_PROTOCOL_VERSIONS:
                    await step("listen", listen)  # subscriptions/listen: opened, acknowledged, closed
                if mode != "legacy":
                    run.line("revision", True, f"ended_on={version}")
        except Exception as e:  # noqa: BLE001
            error = err(e)
    if deadline.cancelled_caught:
        error = f"the run's {RUN_DEADLINE:.0f} s deadline passed"
    if error:
        # The session broke (or would not close): every step not yet printed fails, in order.
        steps = ["connect", "list_tools", "call_add", "progress", "read_resource", "get_prompt", "input_required"]
        steps += ["listen"] * (version in MODERN_PROTOCOL_VERSIONS) + ["revision"] * (mode != "legacy")
        for name in steps:
            if name not in run.printed:
                why = "not run" if name != run.current else "cut short"
                run.line(name, False, error if name == "connect" else f"{why}: {error}")
        print(f"sdk_client: {error}", file=sys.stderr)
    return 0 if all(run.printed.values()) else 1


def parse(argv: list[str]):
    """[--profile NAME] MODE (URL | --stdio CMD [ARG...]); --profile may come anywhere before --stdio."""
    profile, words, command = "probe", [], None
    while argv and command is None:
        if argv[0] == "--profile" and len(argv) > 1:
            profile, argv = argv[1], argv[2:]
        elif argv[0] == "--stdio":
            command, argv = argv[1:], []
        else:
            words, argv = words + [argv[0]], argv[1:]
    if profile not in PROFILES or len(words) != (1 if command is not None else 2) or command == []:
        sys.exit(__doc__)
    server = StdioServerParameters(command=command[0], args=command[1:]) if command else words[1]
    return words[0], server, PROFILES[profile]


if __name__ == "__main__":
    start = time.monotonic()
    mode, server, profile = parse(sys.argv[1:])
    status = anyio.run(main, mode, server, profile)
    print(f"sdk_client: exit {status} after {time.monotonic() - start:.1f} s", file=sys.stderr)
    sys.exit(status)
