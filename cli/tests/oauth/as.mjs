// Minimal OAuth 2.1 / OIDC authorization server for e2e tests (oidc-provider v9, Node >= 20).
// Usage: node as.mjs [PORT]        (or AS_PORT=PORT node as.mjs)
// Env:   AS_SCOPES         resource scopes to offer        (default "mcp:tools mcp:read")
//        AS_CLIENT_ID / AS_CLIENT_SECRET  pre-registered client_credentials client (default e2e-client / e2e-secret)
//        AS_DEFAULT_RESOURCE  resource used when a client sends none (default: none -> opaque token)
//        AS_ACCOUNT        subject auto-logged-in for authorization_code (default "test-user")
import http from 'node:http';
import crypto from 'node:crypto';
import Provider from 'oidc-provider';

const PORT = Number(process.argv[2] || process.env.AS_PORT || 9000);
const ISSUER = `http://127.0.0.1:${PORT}`;
const SCOPES = (process.env.AS_SCOPES || 'mcp:tools mcp:read').split(/\s+/).filter(Boolean);
const CLIENT_ID = process.env.AS_CLIENT_ID || 'e2e-client';
const CLIENT_SECRET = process.env.AS_CLIENT_SECRET || 'e2e-secret';
const DEFAULT_RESOURCE = process.env.AS_DEFAULT_RESOURCE || undefined;
const ACCOUNT = process.env.AS_ACCOUNT || 'test-user';

// Ephemeral signing keys, new on every start. The kid carries a random suffix so a verifier that
// caches the JWKS by kid (e.g. PyJWKClient) refetches after an AS restart instead of failing the
// signature check with a stale key of the same kid.
const run = crypto.randomBytes(4).toString('hex');
const jwk = (type, opts, kid, alg) => ({
  ...crypto.generateKeyPairSync(type, opts).privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig',
});
const jwks = {
  keys: [
    jwk('ec', { namedCurve: 'P-256' }, `es256-${run}`, 'ES256'), // access tokens
    jwk('rsa', { modulusLength: 2048 }, `rs256-${run}`, 'RS256'), // id_token default alg
  ],
};

const provider = new Provider(ISSUER, {
  jwks,
  clients: [{
    client_id: CLIENT_ID,
    client_secret: CLIENT_SECRET,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic', // (v9 in practice also accepted client_secret_post)
    scope: SCOPES.join(' '),
  }],
  // Every scope a client may register / request must be listed here (DCR validates client.scope).
  scopes: ['openid', 'offline_access', ...SCOPES],
  claims: { openid: ['sub'] },
  cookies: { keys: ['e2e-cookie-key-not-secret'] },
  pkce: { required: () => true }, // S256 only (default)
  findAccount: async (ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  features: {
    devInteractions: { enabled: false }, // replaced by the auto-approve handler below
    clientCredentials: { enabled: true },
    registration: { enabled: true }, // open DCR (no initial access token)
    revocation: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => oneOf ?? DEFAULT_RESOURCE,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resourceIndicator, client) => ({
        scope: SCOPES.join(' '),
        audience: resourceIndicator, // aud = the RFC 8707 resource value, verbatim
        accessTokenTTL: 3600,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'ES256' } },
      }),
    },
  },
  ttl: {
    AccessToken: 3600, ClientCredentials: 3600, AuthorizationCode: 60, Interaction: 600,
    Session: 3600, Grant: 3600, RefreshToken: 86400, IdToken: 3600,
  },
});
provider.proxy = false;
provider.on('server_error', (ctx, err) => console.error('server_error', err));
provider.on('grant.error', (ctx, err) => console.error('grant.error', err.message, err.error_description ?? ''));

// Headless auto-approval: log in ACCOUNT and grant everything that was requested.
async function autoApprove(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: ACCOUNT } };
  } else if (prompt.name === 'consent') {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const d = prompt.details;
    if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
    if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(d.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  } else {
    result = { error: 'access_denied', error_description: `unhandled prompt ${prompt.name}` };
  }
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
const server = http.createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    autoApprove(req, res).catch((err) => {
      console.error('interaction error', err);
      res.statusCode = 500;
      res.end(String(err));
    });
    return;
  }
  callback(req, res);
});
server.listen(PORT, '127.0.0.1', () => console.log(`oidc-provider listening on ${ISSUER}`));
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
