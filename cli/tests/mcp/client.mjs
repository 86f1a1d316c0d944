// MCP test client for the official conformance suite's client scenarios
// (@modelcontextprotocol/conformance), built on the MCP TypeScript SDK 1.x.
//
// The suite runs it as a command with the server URL as the last argument and
// the scenario name in MCP_CONFORMANCE_SCENARIO, e.g.
//   conformance client --command "node client.mjs" --scenario tools_call
// It exits 0 when the scenario's steps succeed, 1 on failure, and 2 for a
// scenario it does not know. It must sit next to node_modules (ESM resolves
// packages from the script's folder).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const DEADLINE_MS = 20_000; // below the suite's default 30 s scenario timeout

function newClient(capabilities = {}) {
  return new Client({ name: 'mcp-gateway-test-client', version: '1.0.0' }, { capabilities });
}

// Initializes `client` against the server; returns the transport (to close).
async function connect(client, serverUrl, transportOptions = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(serverUrl), transportOptions);
  await client.connect(transport);
  return transport;
}

function expectText(result, expected) {
  const text = result.content?.find((c) => c.type === 'text')?.text;
  if (text !== expected) throw new Error(`expected ${JSON.stringify(expected)}, got ${JSON.stringify(text)}`);
}

// Handshake only: initialize, notifications/initialized, then close.
async function initialize(serverUrl) {
  const transport = await connect(newClient(), serverUrl);
  await transport.close();
}

// Lists tools and calls add_numbers.
async function toolsCall(serverUrl) {
  const client = newClient();
  const transport = await connect(client, serverUrl);
  const { tools } = await client.listTools();
  if (!tools.some((t) => t.name === 'add_numbers')) throw new Error('tool add_numbers not listed');
  expectText(await client.callTool({ name: 'add_numbers', arguments: { a: 5, b: 3 } }), 'The sum of 5 and 3 is 8');
  await transport.close();
}

// SEP-1034: accepts a form elicitation with empty content; the SDK fills in
// the schema's defaults because the client declares form.applyDefaults.
async function elicitationDefaults(serverUrl) {
  const client = newClient({ elicitation: { form: { applyDefaults: true } } });
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: {} }));
  const transport = await connect(client, serverUrl);
  const result = await client.callTool({ name: 'test_client_elicitation_defaults', arguments: {} });
  if (result.isError) throw new Error(`tool failed: ${JSON.stringify(result.content)}`);
  await transport.close();
}

// SEP-1699: the server closes the tools/call SSE stream after a priming event
// (id + retry); the transport resumes it with GET + Last-Event-ID after the
// server's retry interval and receives the result there.
async function sseRetry(serverUrl) {
  const client = newClient();
  const transport = await connect(client, serverUrl, {
    reconnectionOptions: { initialReconnectionDelay: 1000, maxReconnectionDelay: 5000, reconnectionDelayGrowFactor: 1.5, maxRetries: 3 },
  });
  expectText(await client.callTool({ name: 'test_reconnection', arguments: {} }), 'Reconnection test completed successfully');
  await transport.close();
}

const scenarios = {
  initialize,
  tools_call: toolsCall,
  'elicitation-sep1034-client-defaults': elicitationDefaults,
  'sse-retry': sseRetry,
};

const name = process.env.MCP_CONFORMANCE_SCENARIO;
const serverUrl = process.argv.at(-1);
const run = scenarios[name];
if (!run) {
  console.error(`unknown scenario ${JSON.stringify(name)}; known: ${Object.keys(scenarios).join(', ')}`);
  process.exit(2);
}
if (process.argv.length < 3) {
  console.error('usage: MCP_CONFORMANCE_SCENARIO=<scenario> node client.mjs <server-url>');
  process.exit(2);
}
setTimeout(() => {
  console.error(`scenario ${name} did not finish within ${DEADLINE_MS} ms`);
  process.exit(1);
}, DEADLINE_MS).unref();
try {
  await run(serverUrl);
  process.exit(0);
} catch (error) {
  console.error(`scenario ${name} failed:`, error);
  process.exit(1);
}
