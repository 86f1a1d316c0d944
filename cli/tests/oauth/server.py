"""An MCP server (Streamable HTTP) on the MCP Python SDK's own server classes,
for cli/tests/oauth_e2e.rs: behind a pair of gateways, either open (the edge
is the OAuth resource server) or its own resource server (the edge forwards
its clients' credentials).

Usage: python server.py PORT [--issuer ISSUER --resource URL]
  PORT      the MCP endpoint is http://127.0.0.1:PORT/mcp
  ISSUER    check JWT access tokens of this authorization server (oidc-provider,
            cli/tests/oauth/as.mjs) against its JWKS; without it, no auth
  RESOURCE  the audience tokens must name, and the metadata's `resource`
            (default the server's own URL; behind a forwarding edge, the
            edge's public URL)
"""

import sys

import anyio.to_thread
import jwt  # PyJWT
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("--issuer")
parser.add_argument("--resource")
ARGS = parser.parse_args()
PORT = ARGS.port
ISSUER = ARGS.issuer
RESOURCE = ARGS.resource or f"http://127.0.0.1:{PORT}/mcp"


class JWKSTokenVerifier:
    """Verifies oidc-provider JWT access tokens (RFC 9068 at+jwt) against the issuer's JWKS."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer = issuer
        self.audience = audience
        # oidc-provider's jwks_uri is <issuer>/jwks (read from discovery in real code).
        # cooldown_duration=0: refetch immediately on an unknown kid (AS restarted -> new keys).
        self.jwks = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=True, timeout=5, cooldown_duration=0)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self.jwks.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["ES256", "RS256"],
                issuer=self.issuer,
                audience=self.audience,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
            if jwt.get_unverified_header(token).get("typ") != "at+jwt":
                return None
        except Exception as e:  # noqa: BLE001
            print(f"token rejected: {e!r}", file=sys.stderr)
            return None
        return AccessToken(
            token=token,
            client_id=claims.get("client_id", ""),
            scopes=claims.get("scope", "").split(),
            expires_at=claims["exp"],
            resource=self.audience,  # aud already checked above
            subject=claims["sub"],
            claims=claims,
        )


if ISSUER:
    mcp = MCPServer(
        "oauth-test-server",
        token_verifier=JWKSTokenVerifier(ISSUER, RESOURCE),
        auth=AuthSettings(
            issuer_url=ISSUER,
            resource_server_url=RESOURCE,
            required_scopes=["mcp:tools"],  # also published as PRM scopes_supported
            validate_token_resource=True,
        ),
    )
else:
    mcp = MCPServer("open-test-server")


@mcp.tool()
def echo(text: str) -> str:
    """Echo text back, with the caller's identity."""
    tok = get_access_token()
    who = f"sub={tok.subject} client_id={tok.client_id} scopes={tok.scopes}" if tok else "anonymous"
    return f"echo: {text} ({who})"


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=PORT, streamable_http_path="/mcp")
