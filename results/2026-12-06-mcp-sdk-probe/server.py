"""A small MCP server written with the MCP Python SDK's own server classes (mcp 2.3.0).

Usage: python server.py PORT [dual|legacy]   (PORT 0: any free port; the address is printed as
"serving http://127.0.0.1:N/mcp" once the socket is bound)

dual   - the SDK's MCPServer as it ships: one Streamable HTTP endpoint at /mcp that serves both
         eras, picked per request by the MCP-Protocol-Version header (the SDK has no switch to pick
         one revision: StreamableHTTPSessionManager._handle_request sends any version that is not a
         handshake-era one to the 2026-07-28 path, and the rest to the session path).
legacy - the same server behind a small ASGI wrapper that answers every 2026-era request the way a
         2025-11-25-only server does (400, JSON-RPC -32600 "Unsupported protocol version"), so it is
         a session-revision (2025-11-25) server only, like server-everything 2026.8.31.
"""

import json
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

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


@mcp.resource("probe://greeting")
def greeting() -> str:
    """A fixed text resource."""
    return "hello from the probe"


@mcp.prompt()
def review(topic: str) -> str:
    """A prompt with one argument."""
    return f"Please review {topic}."


def legacy_only(app):
    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            pv = None
            for k, v in scope["headers"]:
                if k == b"mcp-protocol-version":
                    pv = v.decode("latin-1")
            if pv is not None and pv not in HANDSHAKE_PROTOCOL_VERSIONS:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32600, "message": f"Bad Request: Unsupported protocol version: {pv}"},
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    port = int(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "dual"
    app = mcp.streamable_http_app()
    if kind == "legacy":
        starlette_app = app
        app = legacy_only(starlette_app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    print(f"serving http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
