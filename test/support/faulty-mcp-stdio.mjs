// A fault-injecting MCP server over stdio, for tests (run as `node faulty-mcp-stdio.mjs`; plain
// JavaScript so that Node runs it without a loader, whatever its working directory). Built on the
// official SDK (`@modelcontextprotocol/sdk` 1.x, the 2025 handshake). Tools:
// - `whoami`: this process's pid and working directory, as JSON text;
// - `slow` `{ ms }`: answers after `ms`;
// - `crash`: the process exits during the call, before answering;
// - `echo` `{ text }`: answers `echo: <text>`.
// Like many servers it logs every call, arguments included, on stderr (which the gateway must
// not pass on to its own output).
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js"

const tools = [
  { name: "whoami", description: "This process's pid and working directory.", inputSchema: { type: "object", properties: {} } },
  { name: "slow", description: "Answers after ms milliseconds.", inputSchema: { type: "object", properties: { ms: { type: "number" } } } },
  { name: "crash", description: "The process exits during the call.", inputSchema: { type: "object", properties: {} } },
  { name: "echo", description: "Echoes its text.", inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] } }
]

const server = new Server({ name: "faulty-stdio", version: "1.0.0" }, { capabilities: { tools: {} } })
server.setRequestHandler(ListToolsRequestSchema, () => ({ tools }))
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const args = request.params.arguments ?? {}
  process.stderr.write(`call ${request.params.name} ${JSON.stringify(args)}\n`)
  switch (request.params.name) {
    case "whoami":
      return { content: [{ type: "text", text: JSON.stringify({ pid: process.pid, cwd: process.cwd() }) }] }
    case "slow": {
      const ms = typeof args.ms === "number" ? args.ms : 1000
      await new Promise((resolve) => setTimeout(resolve, ms))
      return { content: [{ type: "text", text: `slept ${ms} ms` }] }
    }
    case "echo":
      return { content: [{ type: "text", text: `echo: ${typeof args.text === "string" ? args.text : ""}` }] }
    case "crash":
      process.exit(1)
    // falls through: exit does not return
    default:
      throw new McpError(ErrorCode.InvalidParams, `no tool ${request.params.name}`)
  }
})
await server.connect(new StdioServerTransport())
