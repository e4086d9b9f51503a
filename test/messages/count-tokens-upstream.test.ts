/**
 * count_tokens on a model of a native Messages upstream asks that upstream's own count (issue 26),
 * for the request as the gateway would send it (its model name, the app policy, the tools, the
 * credentials and beta flags of a real call), with only the fields the count endpoint takes (no
 * max_tokens or stream, no variant param such as service_tier), on the Messages route and on
 * Gemini's `:countTokens`. When the upstream cannot count (an error status, an answer that is not
 * a count) the gateway's estimate answers, as it always does for other provider types.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { messageJson, startFakeMessagesUpstream, type FakeMessagesUpstream, type RecordedRequest } from "../support/FakeMessagesUpstream.js"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-count-tokens-upstream"
const POLICY = "Team policy: be brief."
const UPSTREAM_COUNT = 4242

let native: FakeMessagesUpstream
let chat: FakeUpstream
let gateway: TestGateway
/** what the fake's count endpoint answers next */
let counting: "count" | "500" | "404" | "garbage" = "count"

/** the body fields the real count endpoint takes; it refuses any other (400 invalid_request_error) */
const COUNT_FIELDS = ["model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "context_management", "mcp_servers"]

const countReply = (req: RecordedRequest) => {
  if (req.path !== "/v1/messages/count_tokens") return messageJson({ blocks: [{ type: "text", text: "not a count" }] })
  const extra = Object.keys(req.body as Record<string, unknown>).find((key) => !COUNT_FIELDS.includes(key))
  if (extra !== undefined) return { kind: "json" as const, status: 400, body: { type: "error", error: { type: "invalid_request_error", message: `${extra}: Extra inputs are not permitted` } } }
  switch (counting) {
    case "count":
      return { kind: "json" as const, status: 200, body: { input_tokens: UPSTREAM_COUNT } }
    case "500":
      return { kind: "json" as const, status: 500, body: { type: "error", error: { type: "api_error", message: "internal upstream detail" } } }
    case "404":
      return { kind: "json" as const, status: 404, body: { type: "error", error: { type: "not_found_error", message: "no count here" } } }
    case "garbage":
      return { kind: "json" as const, status: 200, body: { tokens: "many" } }
  }
}

beforeAll(async () => {
  native = await startFakeMessagesUpstream()
  chat = await startFakeUpstream()
  native.onRequest(countReply)
  gateway = await startGateway({
    keys: [{ key: KEY, app: "counting" }],
    providers: {
      ant: {
        type: "anthropic",
        baseUrl: native.url,
        apiKey: "upstream-count-key",
        // a variant whose params a real call sends but the count endpoint refuses (service_tier, metadata), and one it takes (output_config)
        models: { "claude-tiered": { variants: { high: { params: { service_tier: "auto", metadata: { user_id: "ops" }, output_config: { effort: "high" } } } } } }
      },
      oai: { type: "openai", baseUrl: chat.url, apiKey: "upstream-chat-key" }
    },
    aliases: { "claude-*": "ant/claude-*", "gpt-*": "oai/gpt-*" },
    apps: { counting: { system: POLICY } }
  })
})

beforeEach(() => {
  counting = "count"
  native.reset()
  native.onRequest(countReply)
  chat.reset()
})

afterAll(async () => {
  await gateway?.close()
  await native?.close()
  await chat?.close()
})

const request = {
  system: "You count.",
  messages: [{ role: "user", content: "How many tokens is this sentence?" }],
  tools: [{ name: "lookup", description: "Look a word up", input_schema: { type: "object", properties: { word: { type: "string" } } } }]
}

const countMessages = async (model: string) => {
  const response = await fetch(`${gateway.url}/v1/messages/count_tokens`, {
    method: "POST",
    headers: { "x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,oauth-2025-04-20", "content-type": "application/json" },
    body: JSON.stringify({ model, ...request })
  })
  const text = await response.text()
  expect(response.status, text).toBe(200)
  return (JSON.parse(text) as { input_tokens: number }).input_tokens
}

const countGemini = async (model: string) => {
  const response = await fetch(`${gateway.url}/v1beta/models/${model}:countTokens`, {
    method: "POST",
    headers: { "x-goog-api-key": KEY, "content-type": "application/json" },
    body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "How many tokens is this sentence?" }] }] })
  })
  const text = await response.text()
  expect(response.status, text).toBe(200)
  return (JSON.parse(text) as { totalTokens: number }).totalTokens
}

type CountBody = { model: string; system?: Array<{ text: string }>; messages: unknown[]; tools?: Array<{ name: string }>; max_tokens?: unknown; stream?: unknown }

describe("count_tokens on an anthropic upstream", () => {
  it("answers the upstream's own count of the request as the gateway would send it", async () => {
    expect(await countMessages("claude-haiku-4-5")).toBe(UPSTREAM_COUNT)
    expect(native.requests).toHaveLength(1)
    const sent = native.requests[0]
    expect(sent.method).toBe("POST")
    expect(sent.path).toBe("/v1/messages/count_tokens")
    const body = sent.body as CountBody
    expect(body.model).toBe("claude-haiku-4-5")
    expect(body.system?.map((b) => b.text)).toEqual([POLICY, "You count."])
    expect(body.tools?.map((t) => t.name)).toEqual(["lookup"])
    expect(body.messages).toHaveLength(1)
    expect(body).not.toHaveProperty("max_tokens")
    expect(body).not.toHaveProperty("stream")
    // a real call's credentials and flags: the gateway's key, never the client's; denied flags held back
    expect(sent.headers["x-api-key"]).toBe("upstream-count-key")
    expect(sent.headers["anthropic-version"]).toBe("2023-06-01")
    expect(sent.headers["anthropic-beta"]).toBe("claude-code-20250219")
  })

  it("sends a variant's params only where the count endpoint takes them: output_config goes, service_tier and metadata do not", async () => {
    expect(await countMessages("ant/claude-tiered#high")).toBe(UPSTREAM_COUNT)
    expect(native.requests).toHaveLength(1)
    const body = native.requests[0].body as Record<string, unknown>
    expect(body.model).toBe("claude-tiered")
    expect(body.output_config).toEqual({ effort: "high" })
    expect(body).not.toHaveProperty("service_tier")
    expect(body).not.toHaveProperty("metadata")
    expect(Object.keys(body).every((key) => COUNT_FIELDS.includes(key))).toBe(true)
  })

  it("Gemini's countTokens on a model an anthropic upstream serves asks it too", async () => {
    expect(await countGemini("claude-haiku-4-5")).toBe(UPSTREAM_COUNT)
    expect(native.requests.map((r) => r.path)).toEqual(["/v1/messages/count_tokens"])
  })

  it("falls back to the estimate when the upstream fails, has no count endpoint or answers something else", async () => {
    // the estimate: what the same request counts on a model whose upstream has no count endpoint
    const estimate = await countMessages("gpt-5")
    expect(chat.requests).toHaveLength(0)
    expect(estimate).toBeGreaterThan(0)
    expect(estimate).not.toBe(UPSTREAM_COUNT)
    for (const mode of ["500", "404", "garbage"] as const) {
      counting = mode
      expect(await countMessages("claude-haiku-4-5"), mode).toBe(estimate)
    }
    expect(native.requests).toHaveLength(3)
    const geminiEstimate = await countGemini("gpt-5")
    counting = "500"
    expect(await countGemini("claude-haiku-4-5")).toBe(geminiEstimate)
  })
})
