// A TypeScript MCP agent that signs every request it sends to a Portcullis gateway.
//
// It uses the official MCP SDK (`@modelcontextprotocol/sdk`) and its Streamable HTTP transport.
// Everything that makes the gateway trust the agent lives in `signedFetch`, the `fetch` the
// transport is given, so the SDK's own requests (initialize, notifications/initialized, the GET
// stream, the DELETE at the end) are signed exactly like the tool calls:
//
// - `Signature-Agent`, `Signature-Input`, `Signature` (RFC 9421, Web Bot Auth profile), made by
//   Cloudflare's `web-bot-auth` package with the Ed25519 key `portcullis keygen` wrote;
// - `Content-Digest` (RFC 9530): SHA-256 of the exact body bytes sent;
// - `Authorization: Bearer <token>`, or `Authorization: DPoP <token>` with a `DPoP` proof
//   (RFC 9449) made by panva's `dpop` package with the same key when the token is bound to it.
//
// It also handles the gateway's answers: a refusal's `error` and `reason` are printed, a 429 or
// 503 with `Retry-After` is retried (signed afresh) after that many seconds, and a call that
// needs a person's approval prints the link and is retried until the person has decided.
//
//   npm install @modelcontextprotocol/sdk web-bot-auth dpop tsx
//   portcullis keygen --out keys      # publish keys/.well-known/... at https://agent.example
//   npx tsx agent.ts --url https://mcp.example.com/mcp --key keys/agent.jwk \
//       --agent https://agent.example --token-file token --dpop \
//       --tool weather.get --arguments '{"city": "Paris"}'

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { signatureHeaders } from 'web-bot-auth';
import { signerFromJWK } from 'web-bot-auth/crypto';
import * as DPoP from 'dpop';

// The label of the signature and the Signature-Agent member it covers.
const LABEL = 'sig1';
// A signature is valid for this long; the gateway accepts up to `signatures.max_age` (300 s).
const LIFETIME_MS = 60_000;
// The longest `Retry-After` wait honoured, and how many times a request is retried.
const MAX_RETRY_AFTER = 30;
const MAX_RETRIES = 3;

const say = (text: string) => process.stderr.write(`${text}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A request body as sent: bytes (the SDK gives JSON text, which is encoded once). */
type Bytes = Uint8Array<ArrayBuffer>;

interface Options {
  url: string;
  key: string;
  agent: string;
  tokenFile?: string;
  dpop: boolean;
  dpopHtu?: string;
}

/** A `fetch` that signs each request (and each retry) afresh: new `created`, nonce and DPoP proof. */
async function signedFetch(o: Options): Promise<typeof fetch> {
  const jwk = JSON.parse(readFileSync(o.key, 'utf8')) as JsonWebKey;
  const signer = await signerFromJWK(jwk);
  const token = o.tokenFile ? readFileSync(o.tokenFile, 'utf8').trim() : undefined;
  const { kty, crv, x, d } = jwk;
  const dpopKeys = {
    privateKey: await crypto.subtle.importKey('jwk', { kty, crv, x, d }, { name: 'Ed25519' }, false, ['sign']),
    publicKey: await crypto.subtle.importKey('jwk', { kty, crv, x }, { name: 'Ed25519' }, true, ['verify']),
  };

  async function signed(url: URL, init: RequestInit, body: Bytes | undefined): Promise<Headers> {
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = new Headers(init.headers);
    if (token !== undefined) {
      if (o.dpop) {
        headers.set('authorization', `DPoP ${token}`);
        const htu = o.dpopHtu ?? `${url.origin}${url.pathname}`;
        headers.set('dpop', await DPoP.generateProof(dpopKeys, htu, method, undefined, token));
      } else {
        headers.set('authorization', `Bearer ${token}`);
      }
    }
    headers.set('signature-agent', `${LABEL}="${o.agent}"`);
    const components: (string | { name: string; parameters: Map<string, string> })[] = ['@method', '@authority', '@path'];
    components.push({ name: 'signature-agent', parameters: new Map([['key', LABEL]]) });
    if (url.search) components.push('@query');
    if (body !== undefined && body.length > 0) {
      const digest = Buffer.from(await crypto.subtle.digest('SHA-256', body)).toString('base64');
      headers.set('content-digest', `sha-256=:${digest}:`);
      components.push('content-digest');
    }
    // web-bot-auth 0.1.3 puts a covered field's whole value in the signature base. For
    // `"signature-agent";key="sig1"` the base holds the member's value alone (RFC 9421
    // §2.1.2), so the message it signs shows that member's value.
    const view = new Headers(headers);
    view.set('signature-agent', `"${o.agent}"`);
    const created = new Date();
    const sig = await signatureHeaders({ method, url: url.href, headers: view }, signer, {
      created,
      expires: new Date(created.getTime() + LIFETIME_MS),
      key: LABEL,
      components,
    });
    headers.set('signature-input', sig['Signature-Input']);
    headers.set('signature', sig.Signature);
    return headers;
  }

  return async (input: string | URL | Request, init: RequestInit = {}) => {
    const url = new URL(input instanceof Request ? input.url : input);
    // The exact bytes sent: the digest is computed over them and nothing re-encodes them.
    const body = typeof init.body === 'string' ? new TextEncoder().encode(init.body) : (init.body as Bytes | undefined);
    for (let attempt = 0; ; attempt++) {
      const response = await fetch(url, { ...init, body, headers: await signed(url, init, body), redirect: 'manual' });
      if (response.status < 400) return response;
      await showRefusal(init.method ?? 'GET', url, response.clone());
      const wait = retryAfter(response);
      if (wait === undefined || attempt === MAX_RETRIES) return response;
      say(`retrying in ${wait} s (Retry-After)`);
      await sleep(wait * 1000);
    }
  };
}

/** Prints the gateway's refusal: `{"error", "reason", "request_id"}`. */
async function showRefusal(method: string, url: URL, response: Response) {
  const body = await response.json().catch(() => undefined);
  if (body && typeof body === 'object' && 'error' in body) {
    say(`gateway refused ${method} ${url.pathname}: ${response.status} ${body.error}: ${body.reason ?? ''} (request id ${body.request_id ?? '?'})`);
  }
  // Other answers (a 405 to the GET stream from a server without one, a backend's error)
  // are the SDK's to handle.
}

/** Seconds to wait before retrying a 429 or 503 that says when (delta-seconds form). */
function retryAfter(response: Response): number | undefined {
  if (response.status !== 429 && response.status !== 503) return undefined;
  const value = response.headers.get('retry-after') ?? '';
  return /^\d+$/.test(value) ? Math.min(Number(value), MAX_RETRY_AFTER) : undefined;
}

/** Calls `tool`; when the gateway asks for a person's approval, prints the link once and
 * retries the same call (while the link is pending the gateway answers with the same link)
 * until the person has approved, denied, or `waitS` has passed. */
async function callWithApproval(client: Client, name: string, args: Record<string, unknown>, waitS: number, pollS: number) {
  const deadline = Date.now() + waitS * 1000;
  const shown = new Set<string>();
  for (;;) {
    try {
      return await client.callTool({ name, arguments: args });
    } catch (e) {
      if (!(e instanceof McpError) || e.code !== ErrorCode.UrlElicitationRequired) throw e;
      const elicitations = ((e.data as { elicitations?: { url?: string; message?: string }[] })?.elicitations) ?? [];
      for (const el of elicitations) {
        if (el.url && !shown.has(el.url)) {
          shown.add(el.url);
          say(`APPROVAL NEEDED: ${el.message ?? e.message}`);
          say(`  open ${el.url} and approve; retrying every ${pollS} s`);
        }
      }
      if (Date.now() > deadline) throw e;
      await sleep(pollS * 1000);
    }
  }
}

async function main(): Promise<number> {
  const { values: a } = parseArgs({
    options: {
      url: { type: 'string' },
      key: { type: 'string' },
      agent: { type: 'string' },
      'token-file': { type: 'string' },
      dpop: { type: 'boolean', default: false },
      'dpop-htu': { type: 'string' },
      tool: { type: 'string' },
      arguments: { type: 'string', default: '{}' },
      'approval-wait': { type: 'string', default: '600' },
      'approval-poll': { type: 'string', default: '5' },
    },
  });
  if (!a.url || !a.key || !a.agent) {
    say('usage: agent.ts --url URL --key agent.jwk --agent https://agent.example [--token-file F [--dpop [--dpop-htu URL]]] [--tool NAME --arguments JSON]');
    return 2;
  }
  const o: Options = { url: a.url, key: a.key, agent: a.agent, tokenFile: a['token-file'], dpop: a.dpop ?? false, dpopHtu: a['dpop-htu'] };
  const transport = new StreamableHTTPClientTransport(new URL(o.url), { fetch: await signedFetch(o) });
  const client = new Client({ name: 'portcullis-example-agent', version: '1.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    console.log(`tools: ${tools.map((t) => t.name).join(' ')}`);
    if (a.tool) {
      const result = await callWithApproval(client, a.tool, JSON.parse(a.arguments ?? '{}'), Number(a['approval-wait']), Number(a['approval-poll']));
      const content = (result.content ?? []) as { type: string; text?: string }[];
      console.log(`${a.tool}: ${content.filter((c) => c.type === 'text').map((c) => c.text).join(' ')}`);
      if (result.isError) return 1;
    }
  } finally {
    // Ends the session at the server (DELETE), then closes the transport.
    await transport.terminateSession();
    await client.close();
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    say(`failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  },
);
