// MCP test server for the official conformance suite's server scenarios
// (@modelcontextprotocol/conformance), built on the MCP TypeScript SDK 1.x.
// It offers every tool, resource and prompt the scenarios name, and serves
// them either over Streamable HTTP or over stdio:
//
//   node everything.mjs http PORT   # http://127.0.0.1:PORT/mcp, sessions, GET
//                                   # stream, DELETE, resumable streams; prints
//                                   # "listening on port PORT" to stderr
//   node everything.mjs stdio       # one session on stdin/stdout
//
// It must sit next to node_modules (ESM resolves packages from the script's
// folder). Diagnostics go to stderr only: in stdio mode stdout is JSON-RPC.

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  isInitializeRequest,
  ListToolsRequestSchema,
  McpError,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

// ---------------------------------------------------------------------------
// Settings (every wait in the server is bounded by these)

const STEP_DELAY_MS = 50; // between the log / progress messages of one call
const RECONNECT_WAIT_MS = 200; // test_reconnection: pause after closing its stream
const RESOURCE_UPDATE_DELAY_MS = 100; // subscribe -> one resources/updated
const RETRY_MS = 1000; // SSE `retry:` advertised in priming events
const MAX_STORED_EVENTS = 1000; // per session, oldest dropped first
const MAX_BODY_BYTES = 4 * 1024 * 1024;

const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------
// Media fixtures

const RED_PIXEL_PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';

// A mono 16-bit PCM WAV file of `sampleCount` silent samples, base64-encoded.
function silentWav(sampleCount, sampleRate = 8000) {
  const dataBytes = sampleCount * 2;
  const wav = Buffer.alloc(44 + dataBytes);
  wav.write('RIFF', 0);
  wav.writeUInt32LE(36 + dataBytes, 4);
  wav.write('WAVE', 8);
  wav.write('fmt ', 12);
  wav.writeUInt32LE(16, 16); // fmt chunk size
  wav.writeUInt16LE(1, 20); // PCM
  wav.writeUInt16LE(1, 22); // channels
  wav.writeUInt32LE(sampleRate, 24);
  wav.writeUInt32LE(sampleRate * 2, 28); // byte rate
  wav.writeUInt16LE(2, 32); // block align
  wav.writeUInt16LE(16, 34); // bits per sample
  wav.write('data', 36);
  wav.writeUInt32LE(dataBytes, 40);
  return wav.toString('base64');
}

const SILENT_WAV = silentWav(800);

const text = (value) => ({ type: 'text', text: value });
const textResult = (value) => ({ content: [text(value)] });

// ---------------------------------------------------------------------------
// Tools
//
// Tools are served from plain JSON Schemas through the low-level request
// handlers rather than McpServer.registerTool: registerTool derives the
// listed schema from zod, which would drop the $schema / $defs keywords that
// the json-schema-2020-12 scenario checks for.

const NO_ARGUMENTS = { type: 'object', properties: {} };

function stringArgument(args, name) {
  const value = args[name];
  if (typeof value !== 'string') throw new Error(`argument "${name}" must be a string`);
  return value;
}

// `ctx.log(extra, level, message)` sends a log notification on the request's
// stream (if the session's level lets it through); `ctx.closeRequestStream`
// exists in HTTP mode only.
function defineTools(mcp, ctx) {
  const elicitationSummary = (prefix, result) =>
    textResult(`${prefix}: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);

  return [
    {
      name: 'test_simple_text',
      description: 'Returns a simple text response',
      inputSchema: NO_ARGUMENTS,
      run: async () => textResult('This is a simple text response for testing.'),
    },
    {
      name: 'test_image_content',
      description: 'Returns an image (1x1 red PNG)',
      inputSchema: NO_ARGUMENTS,
      run: async () => ({ content: [{ type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' }] }),
    },
    {
      name: 'test_audio_content',
      description: 'Returns audio (0.1 s of silent WAV)',
      inputSchema: NO_ARGUMENTS,
      run: async () => ({ content: [{ type: 'audio', data: SILENT_WAV, mimeType: 'audio/wav' }] }),
    },
    {
      name: 'test_embedded_resource',
      description: 'Returns an embedded text resource',
      inputSchema: NO_ARGUMENTS,
      run: async () => ({
        content: [
          {
            type: 'resource',
            resource: {
              uri: 'test://embedded-resource',
              mimeType: 'text/plain',
              text: 'This is an embedded resource content.',
            },
          },
        ],
      }),
    },
    {
      name: 'test_multiple_content_types',
      description: 'Returns text, an image and an embedded resource',
      inputSchema: NO_ARGUMENTS,
      run: async () => ({
        content: [
          text('Multiple content types test:'),
          { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' },
          {
            type: 'resource',
            resource: {
              uri: 'test://mixed-content-resource',
              mimeType: 'application/json',
              text: JSON.stringify({ test: 'data', value: 123 }),
            },
          },
        ],
      }),
    },
    {
      name: 'test_tool_with_logging',
      description: 'Sends three info log messages while it runs',
      inputSchema: NO_ARGUMENTS,
      run: async (_args, extra) => {
        await ctx.log(extra, 'info', 'Tool execution started');
        await sleep(STEP_DELAY_MS);
        await ctx.log(extra, 'info', 'Tool processing data');
        await sleep(STEP_DELAY_MS);
        await ctx.log(extra, 'info', 'Tool execution completed');
        return textResult('Tool with logging executed successfully');
      },
    },
    {
      name: 'test_tool_with_progress',
      description: 'Reports progress 0, 50 and 100 of 100 when given a progress token',
      inputSchema: NO_ARGUMENTS,
      run: async (_args, extra) => {
        const progressToken = extra._meta?.progressToken;
        for (const progress of [0, 50, 100]) {
          if (progress > 0) await sleep(STEP_DELAY_MS);
          if (progressToken !== undefined) {
            await extra.sendNotification({
              method: 'notifications/progress',
              params: { progressToken, progress, total: 100, message: `${progress}% done` },
            });
          }
        }
        return textResult('Tool with progress executed successfully');
      },
    },
    {
      name: 'test_error_handling',
      description: 'Always fails (a result with isError: true)',
      inputSchema: NO_ARGUMENTS,
      run: async () => {
        throw new Error('This tool intentionally returns an error for testing');
      },
    },
    {
      name: 'test_sampling',
      description: 'Asks the client for an LLM completion (sampling/createMessage)',
      inputSchema: {
        type: 'object',
        properties: { prompt: { type: 'string', description: 'The prompt to send to the LLM' } },
        required: ['prompt'],
      },
      run: async (args, extra) => {
        const result = await mcp.server.createMessage(
          {
            messages: [{ role: 'user', content: text(stringArgument(args, 'prompt')) }],
            maxTokens: 100,
          },
          { relatedRequestId: extra.requestId },
        );
        const reply = result.content?.type === 'text' ? result.content.text : JSON.stringify(result.content);
        return textResult(`LLM response: ${reply}`);
      },
    },
    {
      name: 'test_elicitation',
      description: 'Asks the user for a username and email (elicitation/create)',
      inputSchema: {
        type: 'object',
        properties: { message: { type: 'string', description: 'The message to show the user' } },
        required: ['message'],
      },
      run: async (args, extra) => {
        const result = await mcp.server.elicitInput(
          {
            message: stringArgument(args, 'message'),
            requestedSchema: {
              type: 'object',
              properties: {
                username: { type: 'string', description: "User's response" },
                email: { type: 'string', description: "User's email address" },
              },
              required: ['username', 'email'],
            },
          },
          { relatedRequestId: extra.requestId },
        );
        return elicitationSummary('User response', result);
      },
    },
    {
      name: 'test_elicitation_sep1034_defaults',
      description: 'Elicits one field of each primitive type, each with a default (SEP-1034)',
      inputSchema: NO_ARGUMENTS,
      run: async (_args, extra) => {
        const result = await mcp.server.elicitInput(
          {
            message: 'Please review these values',
            requestedSchema: {
              type: 'object',
              properties: {
                name: { type: 'string', description: 'Full name', default: 'John Doe' },
                age: { type: 'integer', description: 'Age in years', default: 30 },
                score: { type: 'number', description: 'Score', default: 95.5 },
                status: {
                  type: 'string',
                  description: 'Account status',
                  enum: ['active', 'inactive', 'pending'],
                  default: 'active',
                },
                verified: { type: 'boolean', description: 'Verified account', default: true },
              },
            },
          },
          { relatedRequestId: extra.requestId },
        );
        return elicitationSummary('Elicitation completed', result);
      },
    },
    {
      name: 'test_elicitation_sep1330_enums',
      description: 'Elicits the five enum schema variants of SEP-1330',
      inputSchema: NO_ARGUMENTS,
      run: async (_args, extra) => {
        const result = await mcp.server.elicitInput(
          {
            message: 'Please pick some options',
            requestedSchema: {
              type: 'object',
              properties: {
                untitledSingle: {
                  type: 'string',
                  description: 'Untitled single-select',
                  enum: ['option1', 'option2', 'option3'],
                },
                titledSingle: {
                  type: 'string',
                  description: 'Titled single-select',
                  oneOf: [
                    { const: 'value1', title: 'First Option' },
                    { const: 'value2', title: 'Second Option' },
                    { const: 'value3', title: 'Third Option' },
                  ],
                },
                legacyEnum: {
                  type: 'string',
                  description: 'Titled single-select, legacy enumNames form',
                  enum: ['opt1', 'opt2', 'opt3'],
                  enumNames: ['Option One', 'Option Two', 'Option Three'],
                },
                untitledMulti: {
                  type: 'array',
                  description: 'Untitled multi-select',
                  items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
                },
                titledMulti: {
                  type: 'array',
                  description: 'Titled multi-select',
                  items: {
                    anyOf: [
                      { const: 'value1', title: 'First Choice' },
                      { const: 'value2', title: 'Second Choice' },
                      { const: 'value3', title: 'Third Choice' },
                    ],
                  },
                },
              },
            },
          },
          { relatedRequestId: extra.requestId },
        );
        return elicitationSummary('Elicitation completed', result);
      },
    },
    {
      name: 'json_schema_2020_12_tool',
      description: 'Tool with JSON Schema 2020-12 features',
      inputSchema: {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        type: 'object',
        $defs: {
          address: {
            type: 'object',
            properties: { street: { type: 'string' }, city: { type: 'string' } },
          },
        },
        properties: {
          name: { type: 'string' },
          address: { $ref: '#/$defs/address' },
        },
        additionalProperties: false,
      },
      run: async (args) => textResult(`Received: ${JSON.stringify(args)}`),
    },
    {
      // SEP-1699: close the request's SSE stream mid-call; the client resumes
      // with GET + Last-Event-ID and gets the result replayed from the event
      // store (or live, if it reconnects before the result is ready).
      name: 'test_reconnection',
      description: 'Closes its SSE stream before answering; the client must resume (SEP-1699)',
      inputSchema: NO_ARGUMENTS,
      run: async (_args, extra) => {
        if (ctx.closeRequestStream) {
          // The SDK primes a stream with an event id only for clients whose
          // MCP-Protocol-Version header is 2025-11-25 or later (that is when
          // extra.closeSSEStream is set). This notification gives any client
          // an event id to resume from; without either, closing would lose
          // the result.
          const notified = await ctx.log(extra, 'info', 'Closing this stream; resume it with Last-Event-ID');
          if (notified || extra.closeSSEStream) {
            ctx.closeRequestStream(extra.requestId);
            await sleep(RECONNECT_WAIT_MS);
          }
        }
        return textResult('Reconnection test completed successfully.');
      },
    },
  ];
}

function registerTools(mcp, ctx) {
  const tools = new Map(defineTools(mcp, ctx).map((tool) => [tool.name, tool]));

  mcp.server.registerCapabilities({ tools: {} });
  mcp.server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [...tools.values()].map(({ name, description, inputSchema }) => ({ name, description, inputSchema })),
  }));

  mcp.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const tool = tools.get(request.params.name);
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    try {
      return await tool.run(request.params.arguments ?? {}, extra);
    } catch (error) {
      // Tool failures (bad arguments included) are results, not protocol errors.
      return { isError: true, content: [text(error instanceof Error ? error.message : String(error))] };
    }
  });
}

// ---------------------------------------------------------------------------
// Resources

function registerResources(mcp) {
  mcp.registerResource(
    'static-text',
    'test://static-text',
    { description: 'A static text resource', mimeType: 'text/plain' },
    async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
    }),
  );

  mcp.registerResource(
    'static-binary',
    'test://static-binary',
    { description: 'A static binary resource (1x1 red PNG)', mimeType: 'image/png' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: RED_PIXEL_PNG }] }),
  );

  mcp.registerResource(
    'watched-resource',
    'test://watched-resource',
    { description: 'A resource to subscribe to; it reports one update per subscription', mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Watched resource content.' }] }),
  );

  mcp.registerResource(
    'template-data',
    new ResourceTemplate('test://template/{id}/data', {
      list: undefined,
      complete: { id: (value) => ['123', '456', '789'].filter((id) => id.startsWith(value)) },
    }),
    { description: 'Data for the given id', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [
        {
          uri: uri.href,
          mimeType: 'application/json',
          text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
        },
      ],
    }),
  );

  // McpServer has no subscription support: track subscribed URIs here, and
  // report one change shortly after each subscription.
  const subscriptions = new Set();
  mcp.server.registerCapabilities({ resources: { subscribe: true } });
  mcp.server.setRequestHandler(SubscribeRequestSchema, async ({ params: { uri } }) => {
    subscriptions.add(uri);
    setTimeout(() => {
      if (!subscriptions.has(uri) || !mcp.isConnected()) return;
      mcp.server.sendResourceUpdated({ uri }).catch((error) => console.error(`resources/updated: ${error.message}`));
    }, RESOURCE_UPDATE_DELAY_MS);
    return {};
  });
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, async ({ params: { uri } }) => {
    subscriptions.delete(uri);
    return {};
  });
}

// ---------------------------------------------------------------------------
// Prompts

const COMPLETION_WORDS = ['paris', 'park', 'party', 'test', 'testing', 'tests'];

function registerPrompts(mcp) {
  mcp.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, () => ({
    messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }],
  }));

  mcp.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments (arg1 offers completions)',
      argsSchema: {
        arg1: completable(z.string().describe('First test argument'), (value) =>
          COMPLETION_WORDS.filter((word) => word.startsWith(value)),
        ),
        arg2: z.string().describe('Second test argument'),
      },
    },
    ({ arg1, arg2 }) => ({
      messages: [{ role: 'user', content: text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`) }],
    }),
  );

  mcp.registerPrompt(
    'test_prompt_with_embedded_resource',
    {
      description: 'A prompt that embeds the given resource',
      argsSchema: { resourceUri: z.string().describe('URI of the resource to embed') },
    },
    ({ resourceUri }) => ({
      messages: [
        {
          role: 'user',
          content: {
            type: 'resource',
            resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          },
        },
        { role: 'user', content: text('Please process the embedded resource above.') },
      ],
    }),
  );

  mcp.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, () => ({
    messages: [
      { role: 'user', content: { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' } },
      { role: 'user', content: text('Please analyze the image above.') },
    ],
  }));
}

// ---------------------------------------------------------------------------
// One MCP server (one per session)

// `closeRequestStream(requestId)`: HTTP mode only, closes a request's SSE stream.
function buildServer({ closeRequestStream } = {}) {
  // Each section below declares the capabilities it implements (McpServer
  // does so for resources, prompts and completions as they are registered).
  const mcp = new McpServer({ name: 'mcp-gateway-everything', version: '1.0.0' });

  // Logging is handled here rather than by the SDK's built-in logging/setLevel
  // handler, which keeps the level private: the tools need it to filter the
  // messages they send on their own request streams.
  let minLevel;
  mcp.server.registerCapabilities({ logging: {} });
  mcp.server.setRequestHandler(SetLevelRequestSchema, async ({ params: { level } }) => {
    minLevel = level;
    return {};
  });
  const log = async (extra, level, data) => {
    if (minLevel && LOG_LEVELS.indexOf(level) < LOG_LEVELS.indexOf(minLevel)) return false;
    await extra.sendNotification({ method: 'notifications/message', params: { level, logger: 'everything', data } });
    return true;
  };

  registerTools(mcp, { log, closeRequestStream });
  registerResources(mcp);
  registerPrompts(mcp);
  return mcp;
}

// ---------------------------------------------------------------------------
// Event store: makes a session's SSE streams resumable (Last-Event-ID)

class MemoryEventStore {
  #events = new Map(); // event id -> { streamId, message }, in id order
  #lastId = 0;

  async storeEvent(streamId, message) {
    const eventId = String(++this.#lastId);
    this.#events.set(eventId, { streamId, message });
    if (this.#events.size > MAX_STORED_EVENTS) this.#events.delete(this.#events.keys().next().value);
    return eventId;
  }

  async getStreamIdForEventId(eventId) {
    return this.#events.get(eventId)?.streamId;
  }

  // Iterates the live map, so events stored while replaying are sent too.
  async replayEventsAfter(lastEventId, { send }) {
    const last = this.#events.get(lastEventId);
    if (!last) throw new Error(`unknown event id ${lastEventId}`);
    for (const [eventId, { streamId, message }] of this.#events) {
      if (streamId === last.streamId && Number(eventId) > Number(lastEventId)) await send(eventId, message);
    }
    return last.streamId;
  }
}

// ---------------------------------------------------------------------------
// HTTP mode

function sendJsonError(res, status, code, message, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

// Reads a JSON body of at most MAX_BODY_BYTES; answers the request itself and
// returns undefined when the body is too large or not JSON.
async function readJsonBody(req, res) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      sendJsonError(res, 413, -32000, 'Request body too large');
      return undefined;
    }
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    sendJsonError(res, 400, ErrorCode.ParseError, 'Parse error: body is not JSON');
    return undefined;
  }
}

async function serveHttp(port) {
  const sessions = new Map(); // Mcp-Session-Id -> transport

  // DNS-rebinding protection: a browser tricked into calling us sends the
  // attacker's name in Host and Origin; accept only loopback names.
  let allowedHosts;
  let allowedOrigins;
  const checkHostAndOrigin = (req) => {
    const host = req.headers.host?.toLowerCase();
    if (!allowedHosts.has(host)) return `Invalid Host header: ${req.headers.host}`;
    const origin = req.headers.origin?.toLowerCase();
    if (origin !== undefined && !allowedOrigins.has(origin)) return `Invalid Origin header: ${req.headers.origin}`;
    return undefined;
  };

  const startSession = async (req, res, body) => {
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new MemoryEventStore(),
      retryInterval: RETRY_MS,
      onsessioninitialized: (sessionId) => sessions.set(sessionId, transport),
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    const mcp = buildServer({ closeRequestStream: (requestId) => transport.closeSSEStream(requestId) });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
  };

  const handle = async (req, res) => {
    if (new URL(req.url, 'http://localhost').pathname !== '/mcp') {
      return sendJsonError(res, 404, -32000, 'Not found: the endpoint is /mcp');
    }
    const refusal = checkHostAndOrigin(req);
    if (refusal) return sendJsonError(res, 403, -32000, refusal);
    if (!['GET', 'POST', 'DELETE'].includes(req.method)) {
      return sendJsonError(res, 405, -32000, 'Method not allowed', { Allow: 'GET, POST, DELETE' });
    }

    const sessionId = req.headers['mcp-session-id'];
    if (sessionId !== undefined) {
      const transport = sessions.get(sessionId);
      if (!transport) return sendJsonError(res, 404, -32001, 'Session not found');
      return transport.handleRequest(req, res);
    }

    // No session yet: only an initialize request may start one.
    if (req.method === 'POST') {
      const body = await readJsonBody(req, res);
      if (body === undefined) return undefined;
      const messages = Array.isArray(body) ? body : [body];
      if (messages.some(isInitializeRequest)) return startSession(req, res, body);
    }
    return sendJsonError(res, 400, -32000, 'Bad Request: No valid session ID provided');
  };

  const httpServer = createServer((req, res) => {
    handle(req, res).catch((error) => {
      console.error(`${req.method} ${req.url}: ${error.stack ?? error}`);
      if (!res.headersSent) sendJsonError(res, 500, ErrorCode.InternalError, 'Internal server error');
      else res.end();
    });
  });

  await new Promise((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(port, '127.0.0.1', resolve);
  });
  const boundPort = httpServer.address().port;
  allowedHosts = new Set(['127.0.0.1', 'localhost', '[::1]'].map((name) => `${name}:${boundPort}`));
  allowedOrigins = new Set([...allowedHosts].map((host) => `http://${host}`));
  console.error(`listening on port ${boundPort}`);

  const shutdown = async () => {
    await Promise.allSettled([...sessions.values()].map((transport) => transport.close()));
    process.exit(0);
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}

// ---------------------------------------------------------------------------
// stdio mode

async function serveStdio() {
  const mcp = buildServer();
  await mcp.connect(new StdioServerTransport());
  console.error('serving MCP on stdio');
}

// ---------------------------------------------------------------------------

const [mode, portArg] = process.argv.slice(2);
if (mode === 'http' && /^\d+$/.test(portArg ?? '')) {
  await serveHttp(Number(portArg));
} else if (mode === 'stdio' && portArg === undefined) {
  await serveStdio();
} else {
  console.error('usage: node everything.mjs http PORT | node everything.mjs stdio');
  process.exit(2);
}
