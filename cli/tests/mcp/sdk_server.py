"""A small MCP server written with the MCP Python SDK's own MCPServer (mcp 2.3.0), for
sdk_client.py and the gateway tests.

Usage:
  python sdk_server.py http PORT [dual|legacy]   # Streamable HTTP at /mcp; PORT 0: any free port.
                                                 # Prints "serving http://127.0.0.1:N/mcp" once bound.
  python sdk_server.py stdio                     # the same server on stdin/stdout (stdout: JSON-RPC only)

dual   - MCPServer.streamable_http_app() as it ships: one endpoint serving both eras, picked per
         request by the MCP-Protocol-Version header (2026-07-28 stateless, 2025-11-25 sessions).
legacy - the same app behind a small ASGI wrapper that answers every 2026-era request as a
         2025-11-25-only server does (400, JSON-RPC -32600 "Unsupported protocol version").
stdio  - the SDK's stdio transport; its stream runner serves either era, picked by the first message.

Tools: add(a, b); slow_steps (two progress notifications, then "done"); confirm(question), which
needs an answer from the client. confirm's parameter is filled by a resolver that returns
Elicit(...): on 2025-11-25 the SDK sends it as a server-to-client `elicitation/create` request
mid-call; on 2026-07-28 it answers the call with an `input_required` result, and the client
retries with the answer. Resource probe://greeting; prompt review(topic).
"""

import json
import socket
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel

mcp = MCPServer("probe-server")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
async def slow_steps(ctx: Context) -> str:
    """Report progress twice, then answer."""
    await ctx.report_progress(1, 2, "step one")
    await anyio.sleep(0.05)
    await ctx.report_progress(2, 2, "step two")
    await anyio.sleep(0.05)
    return "done"


class Answer(BaseModel):
    confirmed: bool
    note: str = ""


def ask(question: str) -> Elicit[Answer]:
    """The resolver: ask the client (elicitation request or input_required, by era)."""
    return Elicit(question, Answer)


@mcp.tool()
def confirm(answer: Annotated[Answer, Resolve(ask)], question: str = "Proceed?") -> str:
    """Ask the client a yes/no question (with a note) and report what it answered."""
    return f"answered confirmed={answer.confirmed} note={answer.note}"


@mcp.resource("probe://greeting")
def greeting() -> str:
    """A fixed text resource."""
    return "hello from the probe"


@mcp.prompt()
def review(topic: str) -> str:
    """A prompt with one argument."""
    return f"Please review {topic}."


def legacy_only(app):
    """Refuse every request whose MCP-Protocol-Version is not a handshake-era (2025) one."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            pv = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            if pv and pv not in HANDSHAKE_PROTOCOL_VERSIONS:
                error = {"code": -32600, "message": f"Bad Request: Unsupported protocol version: {pv}"}
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    if sys.argv[1:2] == ["stdio"]:
        mcp.run(transport="stdio")
        return
    if sys.argv[1:2] != ["http"] or len(sys.argv) < 3:
        sys.exit(__doc__)
    import uvicorn

    port = int(sys.argv[2])
    kind = sys.argv[3] if len(sys.argv) > 3 else "dual"
    app = mcp.streamable_http_app()
    if kind == "legacy":
        app = legacy_only(app)
    elif kind != "dual":
        sys.exit(f"unknown kind {kind!r}: dual or legacy")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    # Listening before it says so: a client that connects at once waits in
    # the backlog until uvicorn has started, rather than being refused.
    sock.listen(128)
    print(f"serving http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])


if __name__ == "__main__":
    main()
