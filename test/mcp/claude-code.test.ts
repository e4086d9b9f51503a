/**
 * The real Claude Code (`claude -p`, 2.1.x) with the gateway's `/mcp` as an HTTP MCP server
 * (`--mcp-config`, the key in its headers), its model calls going through the gateway's Messages
 * API to a scripted native upstream. The upstream's first answer calls the gateway-served tool by
 * the name Claude Code gives MCP tools (`mcp__<server>__<tool>`); Claude Code calls it on `/mcp`,
 * the gateway runs it on server-everything, and the tool's result reaches the upstream in the next
 * request.
 *
 * Two keys: Claude Code's model calls use one of an app without host tools (so the model sees
 * only Claude Code's own tools), `/mcp` one of the app whose host tools it serves.
 */
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode } from "../support/ClaudeCode.js"
import { messageSse, messagesError, startFakeMessagesUpstream, type FakeMessagesUpstream, type RecordedRequest } from "../support/FakeMessagesUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const MODEL_KEY = "sk-claude-code-model-0123456789"
const MCP_KEY = "sk-claude-code-tools-0123456789"
const TOOL = "mcp__gateway__everything__echo"

interface Block {
  readonly type: string
  readonly [key: string]: unknown
}
interface Body {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string | ReadonlyArray<Block> }>
  readonly tools?: ReadonlyArray<{ readonly name: string }>
}

const bodyOf = (r: RecordedRequest): Body => r.body as Body
const blocksOf = (content: string | ReadonlyArray<Block>): ReadonlyArray<Block> => (typeof content === "string" ? [{ type: "text", text: content }] : content)
const offersTool = (body: Body) => (body.tools ?? []).some((t) => t.name === TOOL)

afterEach(async () => {
  await disposeAllClaudeCode()
})

describe("Claude Code with the gateway's /mcp as its MCP server", () => {
  let upstream: FakeMessagesUpstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeMessagesUpstream()
    gateway = await startGateway({
      keys: [
        { key: MODEL_KEY, app: "claude-code" },
        { key: MCP_KEY, app: "team-a" }
      ],
      providers: { ant: { type: "anthropic", baseUrl: upstream.origin, apiKey: "upstream-secret" } },
      aliases: { "claude-*": "ant/claude-*" },
      toolServers: { everything: { command: [process.execPath, everything, "stdio"] } },
      apps: { "team-a": { hostTools: ["everything/echo"] } }
    })
  }, 60_000)
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("calls the gateway-served tool, and its result reaches the upstream", async () => {
    upstream.onRequest((req) => {
      if (req.method !== "POST" || req.path !== "/v1/messages") return messagesError(404, "not_found_error", `no route ${req.method} ${req.path}`)
      const body = bodyOf(req)
      if (!offersTool(body)) return messageSse({ blocks: [{ type: "text", text: "side answer" }] })
      const answered = body.messages.some((m) => blocksOf(m.content).some((b) => b.type === "tool_result"))
      return answered
        ? messageSse({ blocks: [{ type: "text", text: "The gateway's tool answered." }] })
        : messageSse({ blocks: [{ type: "tool_use", id: "toolu_mcp_1", name: TOOL, input: { message: "through the gateway" } }] })
    })
    const mcpConfig = { mcpServers: { gateway: { type: "http", url: `${gateway.url}/mcp`, headers: { Authorization: `Bearer ${MCP_KEY}` } } } }
    const run = await runClaudeCode({
      baseUrl: gateway.url,
      apiKey: MODEL_KEY,
      prompt: "Echo a message with the gateway's tool",
      files: { "mcp.json": JSON.stringify(mcpConfig) },
      extraArgs: ["--mcp-config", "mcp.json", "--strict-mcp-config"],
      allowedTools: [TOOL]
    })
    try {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      expect(run.resultText, describeClaudeCodeRun(run)).toBe("The gateway's tool answered.")
      const main = upstream.requests.filter((r) => r.method === "POST" && r.path === "/v1/messages").map(bodyOf).filter(offersTool)
      expect(main, describeClaudeCodeRun(run)).toHaveLength(2)
      // the model was offered the tool with the schema the server gave it
      expect(main[0].tools?.find((t) => t.name === TOOL)).toMatchObject({ name: TOOL, input_schema: { type: "object", properties: { message: { type: "string" } } } })
      const result = main[1].messages.flatMap((m) => blocksOf(m.content)).find((b) => b.type === "tool_result" && b.tool_use_id === "toolu_mcp_1")
      expect(JSON.stringify(result?.content)).toContain("Echo: through the gateway")
    } finally {
      await run.dispose()
    }
  }, 120_000)
})
