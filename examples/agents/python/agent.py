"""A Python MCP agent that signs every request it sends to a Portcullis gateway.

It uses the official MCP SDK (`mcp`) and its Streamable HTTP client. Everything that makes
the gateway trust the agent lives in `WebBotAuth`, an httpx2 `Auth` handed to the SDK's HTTP
client, so the SDK's own requests (initialize, notifications/initialized, the GET stream,
the DELETE at the end) are signed exactly like the tool calls:

- `Signature-Agent`, `Signature-Input`, `Signature` (RFC 9421, Web Bot Auth profile), made by
  the `http-message-signatures` package with the Ed25519 key `portcullis keygen` wrote;
- `Content-Digest` (RFC 9530) over the exact body bytes sent, made by the same package;
- `Authorization: Bearer <token>`, or `Authorization: DPoP <token>` with a `DPoP` proof
  (RFC 9449) made by `joserfc` with the same key when the token is bound to it.

It also handles the gateway's answers: a refusal's `error` and `reason` are printed, a 429 or
503 with `Retry-After` is retried (signed afresh) after that many seconds, and a call that
needs a person's approval prints the link and is retried until the person has decided.

    pip install -r requirements.txt
    portcullis keygen --out keys     # publish keys/.well-known/... at https://agent.example
    python agent.py --url https://mcp.example.com/mcp --key keys/agent.jwk \\
        --agent https://agent.example --token-file token --dpop \\
        --tool weather.get --arguments '{"city": "Paris"}'
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import secrets
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx2
from http_message_signatures import HTTPMessageSigner, HTTPSignatureKeyResolver, algorithms
from http_message_signatures.httpx2 import adapt_message
from joserfc import jwt
from joserfc.jwk import OKPKey
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

# The label of the signature and the Signature-Agent member it covers.
LABEL = "sig1"
# A signature is valid for this long; the gateway accepts up to `signatures.max_age` (300 s).
LIFETIME = timedelta(seconds=60)
# The longest `Retry-After` wait honoured, and how many times a request is retried.
MAX_RETRY_AFTER = 30
MAX_RETRIES = 3
URL_ELICITATION_REQUIRED = -32042


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _OneKey(HTTPSignatureKeyResolver):
    def __init__(self, key: OKPKey) -> None:
        self.key = key

    def resolve_private_key(self, key_id: str):
        return self.key.private_key


class WebBotAuth(httpx2.Auth):
    """Signs each request (and each retry) afresh: new `created`, nonce and DPoP proof."""

    requires_request_body = True

    def __init__(self, jwk: dict, agent: str, token: str | None, dpop: bool, dpop_htu: str | None) -> None:
        self.key = OKPKey.import_key(jwk)
        # The keyid is the key's RFC 7638 thumbprint, as in the agent's key directory.
        self.keyid = self.key.thumbprint()
        self.agent = agent
        self.token = token
        self.dpop = dpop
        self.dpop_htu = dpop_htu
        self.signer = HTTPMessageSigner(signature_algorithm=algorithms.ED25519, key_resolver=_OneKey(self.key))

    def _dpop_proof(self, request: httpx2.Request) -> str:
        htu = self.dpop_htu or str(request.url.copy_with(query=None, fragment=None))
        claims = {
            "jti": secrets.token_urlsafe(16),
            "htm": request.method,
            "htu": htu,
            "iat": int(time.time()),
            # The proof names the token it goes with: base64url(SHA-256(token)).
            "ath": base64.urlsafe_b64encode(hashlib.sha256(self.token.encode()).digest()).rstrip(b"=").decode(),
        }
        header = {"typ": "dpop+jwt", "alg": "Ed25519", "jwk": self.key.as_dict(private=False)}
        return jwt.encode(header, claims, self.key, algorithms=["Ed25519"])

    def _sign(self, request: httpx2.Request) -> None:
        for name in ("content-digest", "signature", "signature-input"):
            request.headers.pop(name, None)
        if self.token is not None:
            if self.dpop:
                request.headers["authorization"] = f"DPoP {self.token}"
                request.headers["dpop"] = self._dpop_proof(request)
            else:
                request.headers["authorization"] = f"Bearer {self.token}"
        request.headers["signature-agent"] = f'{LABEL}="{self.agent}"'
        components = ["@method", "@authority", "@path", f'"signature-agent";key="{LABEL}"']
        if request.url.query:
            components.append("@query")
        body = request.content
        now = datetime.now(timezone.utc)
        self.signer.sign(
            adapt_message(request),
            key_id=self.keyid,
            created=now,
            expires=now + LIFETIME,
            nonce=secrets.token_urlsafe(32),
            label=LABEL,
            tag="web-bot-auth",
            covered_component_ids=components,
            # With the body, the package adds Content-Digest (sha-256 of these exact bytes)
            # and covers it. A request without a body carries no digest.
            body=body if body else None,
        )

    async def async_auth_flow(self, request: httpx2.Request):
        await request.aread()
        for attempt in range(MAX_RETRIES + 1):
            self._sign(request)
            response = yield request
            if response.status_code < 400:
                return
            await response.aread()
            show_refusal(request, response)
            wait = retry_after(response)
            if wait is None or attempt == MAX_RETRIES:
                return
            say(f"retrying in {wait} s (Retry-After)")
            await asyncio.sleep(wait)


def show_refusal(request: httpx2.Request, response: httpx2.Response) -> None:
    """Prints the gateway's refusal: `{"error", "reason", "request_id"}`."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        what = f"{request.method} {request.url.path}"
        say(f"gateway refused {what}: {response.status_code} {body['error']}: {body.get('reason', '')} (request id {body.get('request_id', '?')})")
    # Other answers (a 405 to the GET stream from a server without one, a backend's error)
    # are the SDK's to handle.


def retry_after(response: httpx2.Response) -> int | None:
    """Seconds to wait before retrying a 429 or 503 that says when (delta-seconds form)."""
    if response.status_code not in (429, 503):
        return None
    value = response.headers.get("retry-after", "")
    return min(int(value), MAX_RETRY_AFTER) if value.isdigit() else None


async def call_with_approval(session: ClientSession, tool: str, arguments: dict, approval_wait: float, poll: float):
    """Calls `tool`; when the gateway asks for a person's approval, prints the link once and
    retries the same call (while the link is pending the gateway answers with the same link)
    until the person has approved, denied, or `approval_wait` has passed."""
    deadline = time.monotonic() + approval_wait
    shown: set[str] = set()
    while True:
        try:
            return await session.call_tool(tool, arguments)
        except MCPError as e:
            if e.code != URL_ELICITATION_REQUIRED:
                raise
            for elicitation in (e.data or {}).get("elicitations", []):
                if elicitation.get("url") not in shown:
                    shown.add(elicitation.get("url"))
                    say(f"APPROVAL NEEDED: {elicitation.get('message', e.message)}")
                    say(f"  open {elicitation.get('url')} and approve; retrying every {poll:g} s")
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(poll)


async def run(args: argparse.Namespace) -> int:
    jwk = json.loads(Path(args.key).read_text())
    token = Path(args.token_file).read_text().strip() if args.token_file else None
    auth = WebBotAuth(jwk, args.agent, token, args.dpop, args.dpop_htu)
    # The SDK uses this client for every request it makes; no redirects are followed.
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=300), follow_redirects=False)
    async with http, streamable_http_client(args.url, http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            print("tools:", " ".join(t.name for t in tools.tools), flush=True)
            if args.tool:
                result = await call_with_approval(session, args.tool, json.loads(args.arguments), args.approval_wait, args.approval_poll)
                text = " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")
                print(f"{args.tool}: {text}", flush=True)
                if result.is_error:
                    return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="the gateway's MCP endpoint")
    p.add_argument("--key", required=True, help="the private JWK `portcullis keygen` wrote (agent.jwk)")
    p.add_argument("--agent", required=True, help="the https origin that publishes the key directory")
    p.add_argument("--token-file", help="a file holding the OAuth access token")
    p.add_argument("--dpop", action="store_true", help="the token is bound to the key: send it with a DPoP proof")
    p.add_argument("--dpop-htu", help="the URL proofs name (the gateway's public URL, when reached at another address)")
    p.add_argument("--tool", help="a tool to call after listing them")
    p.add_argument("--arguments", default="{}", help="the tool's arguments as JSON")
    p.add_argument("--approval-wait", type=float, default=600, help="seconds to wait for a person's approval")
    p.add_argument("--approval-poll", type=float, default=5, help="seconds between retries while approval is pending")
    args = p.parse_args()
    try:
        return asyncio.run(run(args))
    except Exception as e:  # noqa: BLE001 (the agent's last word: say what failed)
        for cause in leaves(e):
            if isinstance(cause, MCPError):
                say(f"MCP error {cause.code}: {cause.message}")
            else:
                say(f"failed: {type(cause).__name__}: {cause}")
    return 1


def leaves(e: BaseException):
    """The exceptions inside the SDK's task-group exception groups."""
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            yield from leaves(inner)
    else:
        yield e


if __name__ == "__main__":
    sys.exit(main())
