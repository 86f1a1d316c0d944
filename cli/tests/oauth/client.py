"""OAuth-capable MCP client (mcp 2.x Python SDK) for e2e tests.

Given only the MCP server URL it: sends the request -> gets 401 -> reads resource_metadata from
WWW-Authenticate (RFC 9728) -> fetches the protected-resource metadata -> fetches the AS metadata
(RFC 8414 / OIDC discovery) -> gets a token -> retries, then calls tools/list and a tool.

Usage:
  venv/bin/python client.py URL [--grant client_credentials|authorization_code]
                            [--client-id ID --client-secret SECRET] [--issuer ISSUER]
                            [--tool NAME --args JSON]
  client_credentials (default): pre-registered confidential client (default e2e-client/e2e-secret).
  authorization_code: dynamic client registration + PKCE; the browser step is done headlessly by
                      following the AS redirects with httpx2 (the AS must auto-approve, as as.mjs does).
"""

import argparse
import asyncio
import json
import sys
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

REDIRECT_URI = "http://127.0.0.1:33418/callback"  # never listened on; we intercept the redirect


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class HeadlessBrowser:
    """redirect_handler/callback_handler pair: follows the AS's redirects (login + consent are
    auto-approved by the AS) until it lands on REDIRECT_URI, then hands code/state/iss back."""

    def __init__(self, redirect_uri: str, max_hops: int = 15) -> None:
        self.redirect_uri = redirect_uri
        self.max_hops = max_hops
        self.result: AuthorizationCodeResult | None = None

    async def redirect_handler(self, authorization_url: str) -> None:
        url = authorization_url
        async with httpx2.AsyncClient(timeout=10) as http:  # keeps the AS's session cookies
            for _ in range(self.max_hops):
                print(f"  [browser] GET {url}", file=sys.stderr)
                resp = await http.get(url)
                if resp.status_code not in (302, 303, 307):
                    raise RuntimeError(f"authorization stopped at {url}: {resp.status_code} {resp.text[:500]}")
                url = str(resp.url.join(resp.headers["location"]))
                if url.startswith(self.redirect_uri):
                    q = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
                    if "error" in q:
                        raise RuntimeError(f"authorization error: {q}")
                    self.result = AuthorizationCodeResult(code=q["code"], state=q.get("state"), iss=q.get("iss"))
                    return
        raise RuntimeError(f"too many redirects, last {url}")

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


async def log_request(request: httpx2.Request) -> None:
    body = ""
    if request.url.path.endswith(("/token", "/reg")):  # show what the SDK sends to the AS
        body = f"  body={request.content.decode()}"
    print(f"-> {request.method} {request.url}{body}", file=sys.stderr)


async def log_response(response: httpx2.Response) -> None:
    extra = ""
    if response.status_code == 401:
        extra = f"  WWW-Authenticate: {response.headers.get('www-authenticate')}"
    print(f"<- {response.status_code} {response.request.url}{extra}", file=sys.stderr)


def build_auth(args: argparse.Namespace) -> httpx2.Auth:
    storage = MemoryStorage()
    if args.grant == "client_credentials":
        return ClientCredentialsOAuthProvider(
            server_url=args.url,
            storage=storage,
            client_id=args.client_id,
            client_secret=args.client_secret,
            token_endpoint_auth_method="client_secret_basic",
            issuer=args.issuer,  # None -> MCPDeprecationWarning, whatever the PRM names is used
        )
    browser = HeadlessBrowser(REDIRECT_URI)
    return OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="mcp-e2e-client",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_basic",
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--grant", choices=["client_credentials", "authorization_code"], default="client_credentials")
    p.add_argument("--client-id", default="e2e-client")
    p.add_argument("--client-secret", default="e2e-secret")
    p.add_argument("--issuer", default=None, help="pin the AS issuer (client_credentials)")
    p.add_argument("--tool", default="echo")
    p.add_argument("--args", default='{"text": "hello"}')
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--legacy", action="store_true", help="skip the server/discover probe, use initialize")
    args = p.parse_args()

    auth = build_auth(args)
    http = httpx2.AsyncClient(
        auth=auth,
        timeout=httpx2.Timeout(30, read=60),
        event_hooks={"request": [log_request], "response": [log_response]},
    )
    with_timeout = asyncio.timeout(args.timeout)
    async with with_timeout, http, Client(
        streamable_http_client(args.url, http_client=http), mode="legacy" if args.legacy else "auto"
    ) as client:
        tools = await client.list_tools()
        print("tools/list:", [t.name for t in tools.tools])
        result = await client.call_tool(args.tool, json.loads(args.args))
        print("tools/call:", result.model_dump_json(exclude_none=True))
        if result.is_error:
            return 1
    tok = await auth.context.storage.get_tokens()
    if tok:
        print("token response: scope=%r refresh_token=%s" % (tok.scope, bool(tok.refresh_token)))
        # unverified peek at the JWT access token (the server verified it)
        import jwt

        print("access token header:", jwt.get_unverified_header(tok.access_token))
        print("access token claims:", jwt.decode(tok.access_token, options={"verify_signature": False}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
