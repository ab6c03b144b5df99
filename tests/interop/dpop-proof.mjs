// Makes DPoP proofs (RFC 9449) with panva's `dpop` package, a maintained implementation that
// is not ours, for tests/suite/dpop.rs. scripts/test.sh installs the package (pinned) into
// target/interop; PORTCULLIS_INTEROP_NODE_MODULES names that folder.
//
//   node dpop-proof.mjs keygen ES256            -> a private JWK on stdout
//   node dpop-proof.mjs proof '<request JSON>'  -> the proof on stdout
// The request JSON: {"jwk": private JWK, "alg": "Ed25519" | "ES256", "htu", "htm", "token"}.
import { createRequire } from 'node:module';
import path from 'node:path';

const modules = process.env.PORTCULLIS_INTEROP_NODE_MODULES;
if (!modules) {
  console.error('PORTCULLIS_INTEROP_NODE_MODULES is not set (scripts/test.sh sets it)');
  process.exit(2);
}
const require = createRequire(path.join(modules, 'index.js'));
const DPoP = await import(require.resolve('dpop'));
const { subtle } = globalThis.crypto;

const ALGORITHMS = {
  Ed25519: { name: 'Ed25519' },
  ES256: { name: 'ECDSA', namedCurve: 'P-256' },
};

const [command, arg] = process.argv.slice(2);
if (command === 'keygen') {
  const pair = await subtle.generateKey(ALGORITHMS[arg], true, ['sign', 'verify']);
  process.stdout.write(JSON.stringify(await subtle.exportKey('jwk', pair.privateKey)));
} else if (command === 'proof') {
  const req = JSON.parse(arg);
  const algorithm = ALGORITHMS[req.alg];
  // The public members alone (RFC 7638's for these key types): the proof carries those.
  const { kty, crv, x, y, d } = req.jwk;
  const pub = y === undefined ? { kty, crv, x } : { kty, crv, x, y };
  const privateKey = await subtle.importKey('jwk', { ...pub, d }, algorithm, false, ['sign']);
  const publicKey = await subtle.importKey('jwk', pub, algorithm, true, ['verify']);
  const proof = await DPoP.generateProof({ privateKey, publicKey }, req.htu, req.htm, undefined, req.token);
  process.stdout.write(proof);
} else {
  console.error(`unknown command ${command}`);
  process.exit(2);
}
