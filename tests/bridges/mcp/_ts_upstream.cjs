// An upstream built on the TypeScript SDK's low-level Server (v1), over stdio, for the
// proxy tests: the tools the conformance suite's server scenarios call (as the suite's
// own everything-server answers them), plus the tools the proxy's own tests need.
//
// Run as: node _ts_upstream.cjs LOG; the SDK comes from the npm cache the Makefile fills
// (.cache/npm at the repository's root; an MCP client passes a server only a few
// environment variables, so the path is not taken from one). Every tool body that runs appends "<tool>\n" to LOG
// first, so a test counts executions across processes.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const prefix = path.resolve(__dirname, "..", "..", "..", ".cache", "npm");
const sdk = createRequire(path.join(prefix, "node_modules", "index.js"));
const { Server } = sdk("@modelcontextprotocol/sdk/server/index.js");
const { StdioServerTransport } = sdk("@modelcontextprotocol/sdk/server/stdio.js");
const {
  CallToolRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  ListToolsRequestSchema,
  McpError,
} = sdk("@modelcontextprotocol/sdk/types.js");

const LOG = process.argv[2] || "/dev/null";
const IMAGE = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const AUDIO = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";
const EMPTY = { type: "object", properties: {} };
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const text = (t) => ({ content: [{ type: "text", text: t }] });

const SCHEMA_2020_12 = {
  $schema: "https://json-schema.org/draft/2020-12/schema",
  type: "object",
  $defs: {
    address: {
      $anchor: "addressDef",
      type: "object",
      properties: { street: { type: "string" }, city: { type: "string" } },
    },
  },
  properties: {
    name: { type: "string" },
    address: { $ref: "#/$defs/address" },
    contactMethod: { type: "string", enum: ["phone", "email"] },
    phone: { type: "string" },
    email: { type: "string" },
  },
  allOf: [{ anyOf: [{ required: ["phone"] }, { required: ["email"] }] }],
  if: { properties: { contactMethod: { const: "phone" } }, required: ["contactMethod"] },
  then: { required: ["phone"] },
  else: { required: ["email"] },
  additionalProperties: false,
};

const ELICIT_1034 = {
  message: "Please review and update the form fields with defaults",
  requestedSchema: {
    type: "object",
    properties: {
      name: { type: "string", description: "User name", default: "John Doe" },
      age: { type: "integer", description: "User age", default: 30 },
      score: { type: "number", description: "User score", default: 95.5 },
      status: {
        type: "string",
        description: "User status",
        enum: ["active", "inactive", "pending"],
        default: "active",
      },
      verified: { type: "boolean", description: "Verification status", default: true },
    },
    required: [],
  },
};

const ELICIT_1330 = {
  message: "Please select options from the enum fields",
  requestedSchema: {
    type: "object",
    properties: {
      untitledSingle: { type: "string", description: "Select one option", enum: ["option1", "option2", "option3"] },
      titledSingle: {
        type: "string",
        description: "Select one option with titles",
        oneOf: [
          { const: "value1", title: "First Option" },
          { const: "value2", title: "Second Option" },
          { const: "value3", title: "Third Option" },
        ],
      },
      legacyEnum: {
        type: "string",
        description: "Select one option (legacy)",
        enum: ["opt1", "opt2", "opt3"],
        enumNames: ["Option One", "Option Two", "Option Three"],
      },
      untitledMulti: {
        type: "array",
        description: "Select multiple options",
        minItems: 1,
        maxItems: 3,
        items: { type: "string", enum: ["option1", "option2", "option3"] },
      },
      titledMulti: {
        type: "array",
        description: "Select multiple options with titles",
        minItems: 1,
        maxItems: 3,
        items: {
          anyOf: [
            { const: "value1", title: "First Choice" },
            { const: "value2", title: "Second Choice" },
            { const: "value3", title: "Third Choice" },
          ],
        },
      },
    },
    required: [],
  },
};

async function elicit(extra, params) {
  const answer = await extra.sendRequest({ method: "elicitation/create", params }, ElicitResultSchema);
  return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content || {})}`);
}

const TRANSFER = {
  type: "object",
  properties: { to: { type: "string" }, amount: { type: "integer" } },
  required: ["to", "amount"],
};

async function askWhenTold(args) {
  while (!fs.existsSync(`${LOG}.${args.to}`)) await sleep(10);
  let outcome;
  try {
    const answer = await server.elicitInput({ message: `Confirm transfer of ${args.amount} to ${args.to}?`, requestedSchema: EMPTY });
    outcome = answer.action;
  } catch (error) {
    outcome = `error ${error.code}: ${error.message}`;
  }
  fs.appendFileSync(LOG, `asked ${args.to}: ${outcome}\n`);
  return text(outcome);
}

const TOOLS = {
  test_simple_text: {
    description: "Tests simple text content response",
    title: "Simple text",
    annotations: { readOnlyHint: true, openWorldHint: false },
    run: async () => text("This is a simple text response for testing."),
  },
  test_image_content: {
    description: "Tests image content response",
    run: async () => ({ content: [{ type: "image", data: IMAGE, mimeType: "image/png" }] }),
  },
  test_audio_content: {
    description: "Tests audio content response",
    run: async () => ({ content: [{ type: "audio", data: AUDIO, mimeType: "audio/wav" }] }),
  },
  test_embedded_resource: {
    description: "Tests embedded resource content response",
    run: async () => ({
      content: [
        {
          type: "resource",
          resource: {
            uri: "test://embedded-resource",
            mimeType: "text/plain",
            text: "This is an embedded resource content.",
          },
        },
      ],
    }),
  },
  test_multiple_content_types: {
    description: "Tests response with multiple content types (text, image, resource)",
    run: async () => ({
      content: [
        { type: "text", text: "Multiple content types test:" },
        { type: "image", data: IMAGE, mimeType: "image/png" },
        {
          type: "resource",
          resource: {
            uri: "test://mixed-content-resource",
            mimeType: "application/json",
            text: JSON.stringify({ test: "data", value: 123 }),
          },
        },
      ],
    }),
  },
  test_tool_with_logging: {
    description: "Tests tool that emits log messages during execution",
    run: async (args, extra) => {
      for (const data of ["Tool execution started", "Tool processing data", "Tool execution completed"]) {
        await extra.sendNotification({ method: "notifications/message", params: { level: "info", data } });
        await sleep(20);
      }
      return text("Tool with logging executed successfully");
    },
  },
  test_tool_with_progress: {
    description: "Tests tool that reports progress notifications",
    run: async (args, extra) => {
      const progressToken = extra._meta && extra._meta.progressToken;
      for (const progress of [0, 50, 100]) {
        if (progressToken !== undefined) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
          });
        }
        await sleep(20);
      }
      return text(String(progressToken));
    },
  },
  test_error_handling: {
    description: "Tests error response handling",
    run: async () => ({
      isError: true,
      content: [{ type: "text", text: "This tool intentionally returns an error for testing" }],
    }),
  },
  test_sampling: {
    description: "Tests server-initiated sampling (LLM completion request)",
    inputSchema: {
      type: "object",
      properties: { prompt: { type: "string", description: "The prompt to send to the LLM" } },
      required: ["prompt"],
    },
    run: async (args, extra) => {
      const answer = await extra.sendRequest(
        {
          method: "sampling/createMessage",
          params: { messages: [{ role: "user", content: { type: "text", text: args.prompt } }], maxTokens: 100 },
        },
        CreateMessageResultSchema,
      );
      return text(`LLM response: ${(answer.content && answer.content.text) || "No response"}`);
    },
  },
  test_elicitation: {
    description: "Tests server-initiated elicitation (user input request)",
    inputSchema: {
      type: "object",
      properties: { message: { type: "string", description: "The message to show the user" } },
      required: ["message"],
    },
    run: async (args, extra) => {
      const answer = await extra.sendRequest(
        {
          method: "elicitation/create",
          params: {
            message: args.message,
            requestedSchema: {
              type: "object",
              properties: { response: { type: "string", description: "User's response" } },
              required: ["response"],
            },
          },
        },
        ElicitResultSchema,
      );
      return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content || {})}`);
    },
  },
  test_elicitation_sep1034_defaults: {
    description: "Tests elicitation with default values per SEP-1034",
    run: async (args, extra) => elicit(extra, ELICIT_1034),
  },
  test_elicitation_sep1330_enums: {
    description: "Tests elicitation with enum schema improvements per SEP-1330",
    run: async (args, extra) => elicit(extra, ELICIT_1330),
  },
  json_schema_2020_12_tool: {
    description: "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
    inputSchema: SCHEMA_2020_12,
    run: async (args) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`),
  },
  // Not the suite's: the case. The tool starts, asks the person, and passes the
  // error its elicitation got back as the tools/call error (the code the client sent).
  start_then_elicit: {
    description: "Starts, asks the person, and fails with the elicitation's error",
    run: async (args, extra) => {
      try {
        return await elicit(extra, { message: "Go on?", requestedSchema: EMPTY });
      } catch (error) {
        throw new McpError(error.code, `elicitation failed: ${error.message}`);
      }
    },
  },
  // Not the suite's: a handler that, as handlers do by default, ignores its AbortSignal
  // and asks through the server-level method (no link to its request), once the test
  // creates the file LOG.<to>; it logs "asked <to>: <outcome>" and returns the outcome.
  // Two names, so one can time out (by policy) while the other waits on.
  ask_when_told: { description: "Asks to confirm a transfer when told", inputSchema: TRANSFER, run: askWhenTold },
  ask_when_told_patient: { description: "The same, under another policy", inputSchema: TRANSFER, run: askWhenTold },
  structured_report: {
    description: "Structured content, an output schema, a resource link, annotations and _meta",
    title: "Structured report",
    outputSchema: {
      type: "object",
      properties: { total: { type: "integer" } },
      required: ["total"],
    },
    annotations: { readOnlyHint: true, idempotentHint: true },
    _meta: { "example.com/owner": "reports" },
    run: async () => ({
      content: [
        { type: "text", text: '{"total":3}', annotations: { audience: ["user"], priority: 0.5 } },
        { type: "resource_link", uri: "file:///reports/3.txt", name: "report 3", mimeType: "text/plain" },
      ],
      structuredContent: { total: 3 },
      _meta: { "example.com/trace": "t-1" },
    }),
  },
  // Not the suite's: an isError result with blocks of its own (what the client must get).
  error_with_image: {
    description: "Fails with a text and an image block, structuredContent and _meta",
    run: async () => ({
      isError: true,
      content: [
        { type: "text", text: "render failed" },
        { type: "image", data: IMAGE, mimeType: "image/png" },
      ],
      structuredContent: { code: "E_RENDER" },
      _meta: { "example.com/trace": "t-err" },
    }),
  },
  // The capabilities this connection's client declared (the gateway's, one per set).
  declared_capabilities: {
    description: "The client capabilities declared on this connection",
    run: async () => text(JSON.stringify(server.getClientCapabilities() || {})),
  },
  // Listed (and run) only for a client that declared sampling.
  sampling_only: {
    description: "Asks the client's model; listed only to clients that declared sampling",
    needs: "sampling",
    run: async (args, extra) => {
      const answer = await extra.sendRequest(
        {
          method: "sampling/createMessage",
          params: { messages: [{ role: "user", content: { type: "text", text: "ping" } }], maxTokens: 5 },
        },
        CreateMessageResultSchema,
      );
      return text(`sampled: ${(answer.content && answer.content.text) || ""}`);
    },
  },
  // Answers at once, then logs once the file `when` exists (the test makes it after the
  // call has ended: a log line no call waits for, whatever the machine's speed).
  log_later: {
    description: "Logs a message once the file `when` exists",
    inputSchema: { type: "object", properties: { when: { type: "string" } }, required: ["when"] },
    run: async (args) => {
      const poll = setInterval(() => {
        if (!fs.existsSync(args.when)) return;
        clearInterval(poll);
        server.sendLoggingMessage({ level: "warning", data: "after the call" }).catch(() => {});
      }, 10);
      return text("will log");
    },
  },
};

const declared = (need) => !need || Boolean((server.getClientCapabilities() || {})[need]);

const server = new Server(
  { name: "ts-upstream", version: "1.0.0" },
  { capabilities: { tools: {}, logging: {} } },
);
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: Object.entries(TOOLS).filter(([, t]) => declared(t.needs)).map(([name, t]) => {
    const listed = { name, description: t.description, inputSchema: t.inputSchema || EMPTY };
    for (const key of ["title", "outputSchema", "annotations", "_meta"]) {
      if (t[key] !== undefined) listed[key] = t[key];
    }
    return listed;
  }),
}));
server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const tool = TOOLS[request.params.name];
  if (!tool || !declared(tool.needs)) throw new McpError(-32602, `Tool ${request.params.name} not found`);
  fs.appendFileSync(LOG, `${request.params.name}\n`);
  return tool.run(request.params.arguments || {}, extra);
});
server.connect(new StdioServerTransport());
