/**
 * The real Codex CLI (0.169) and Gemini CLI (0.61) with the gateway's `/mcp` as an HTTP MCP
 * server, configured as the README says (Codex: `[mcp_servers.gateway] url` + `bearer_token_env_var`;
 * Gemini CLI: `mcpServers.gateway.httpUrl` + `headers`), their model calls going through the gateway
 * to a scripted chat-completions upstream. The upstream's first answer calls the gateway-served
 * tool by the name each CLI gives it (Codex `mcp__gateway__everything__echo`, Gemini CLI
 * `mcp_gateway_everything__echo`); the tool's result reaches the upstream in the next request.
 *
 * Codex with a model id it knows to take a hosted `tool_search` tool (gpt-5.5) defers MCP tools
 * behind that tool, which the gateway's Responses API refuses (spec 7.2): the test names a model id
 * Codex does not know (an alias of the gateway), which it offers the MCP tools directly.
 */
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { codexAnswer, describeCodexRun, disposeAllCodex, runCodex } from "../support/Codex.js"
import { chatSse, openAiError, startFakeUpstream, type FakeUpstream, type RecordedRequest } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { describeGeminiCliRun, disposeAllGeminiCli, runGeminiCli } from "../support/GeminiCli.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const MODEL_KEY = "sk-cli-model-0123456789"
const MCP_KEY = "sk-cli-tools-0123456789"

interface ChatBody {
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content?: unknown; readonly tool_call_id?: string }>
}
const bodyOf = (r: RecordedRequest): ChatBody => r.body as ChatBody
const offers = (body: ChatBody, tool: string) => (body.tools ?? []).some((t) => t.function.name === tool)

afterEach(async () => {
  await disposeAllCodex()
  await disposeAllGeminiCli()
})

describe("Codex and Gemini CLI with the gateway's /mcp as their MCP server", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      keys: [
        { key: MODEL_KEY, app: "agents" },
        { key: MCP_KEY, app: "team-a" }
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      aliases: { "team-model": "up/m", "gemini-*": "up/m" },
      toolServers: { everything: { command: [process.execPath, everything, "stdio"] } },
      apps: { "team-a": { hostTools: ["everything/echo"] } }
    })
  }, 60_000)
  afterEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  /** The scripted model: calls `tool` once where it is offered, then answers "done". */
  const script = (tool: string, message: string) =>
    upstream.onRequest((req) => {
      if (req.method !== "POST" || req.path !== "/v1/chat/completions") return openAiError(404, `no route ${req.method} ${req.path}`)
      const body = bodyOf(req)
      if (!offers(body, tool)) return chatSse({ content: "side answer" })
      return body.messages.some((m) => m.role === "tool") ? chatSse({ content: "done" }) : chatSse({ toolCalls: [{ id: "call_mcp_1", name: tool, arguments: JSON.stringify({ message }) }] })
    })

  /** What the upstream got back for the call, in the request after it. */
  const resultSent = (tool: string): string => {
    const main = upstream.requests.map(bodyOf).filter((b) => offers(b, tool))
    expect(main).toHaveLength(2)
    return JSON.stringify(main[1].messages.filter((m) => m.role === "tool").map((m) => m.content))
  }

  it("Codex: [mcp_servers.gateway] with url and bearer_token_env_var", async () => {
    script("mcp__gateway__everything__echo", "hello codex")
    const run = await runCodex({
      baseUrl: gateway.url,
      apiKey: MODEL_KEY,
      model: "team-model",
      prompt: "Echo a message with the gateway's tool",
      env: { GATEWAY_MCP_KEY: MCP_KEY },
      extraConfig: [`[mcp_servers.gateway]`, `url = "${gateway.url}/mcp"`, `bearer_token_env_var = "GATEWAY_MCP_KEY"`, `default_tools_approval_mode = "approve"`].join("\n")
    })
    try {
      expect(run.exitCode, describeCodexRun(run)).toBe(0)
      expect(codexAnswer(run), describeCodexRun(run)).toBe("done")
      expect(resultSent("mcp__gateway__everything__echo")).toContain("Echo: hello codex")
    } finally {
      await run.dispose()
    }
  }, 120_000)

  it("Gemini CLI: mcpServers.gateway with httpUrl and headers", async () => {
    script("mcp_gateway_everything__echo", "hello gemini")
    const run = await runGeminiCli({
      baseUrl: gateway.url,
      apiKey: MODEL_KEY,
      model: "gemini-2.5-flash",
      prompt: "Echo a message with the gateway's tool",
      approvalMode: "yolo",
      settings: { mcpServers: { gateway: { httpUrl: `${gateway.url}/mcp`, headers: { Authorization: `Bearer ${MCP_KEY}` } } } }
    })
    try {
      expect(run.exitCode, describeGeminiCliRun(run)).toBe(0)
      expect(run.responseText, describeGeminiCliRun(run)).toBe("done")
      expect(resultSent("mcp_gateway_everything__echo")).toContain("Echo: hello gemini")
    } finally {
      await run.dispose()
    }
  }, 120_000)
})
