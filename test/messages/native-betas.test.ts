/**
 * Messages beta flags (`anthropic-beta`, `messages-beta`): a native (`anthropic`) upstream gets the
 * client's flags on the allow-list (the default one, or `providers.<name>.betas`), merged with the
 * operator's configured `anthropic-beta`; flags needing a server feature never reach it; openai
 * and gemini upstreams never get the header.
 */
import * as net from "node:net"
import { Either } from "effect"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { decodeConfig } from "../../src/Config.js"
import { startFakeGeminiUpstream, type FakeGeminiUpstream } from "../support/FakeGeminiUpstream.js"
import { startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-native-betas-key"

/** What Claude Code sends, flags for model behaviour and flags needing server features mixed. */
const claudeCode = [
  "claude-code-20250219",
  "oauth-2025-04-20",
  "interleaved-thinking-2025-05-14",
  "context-1m-2025-08-07",
  "fine-grained-tool-streaming-2025-05-14",
  "token-efficient-tools-2025-02-19",
  "files-api-2025-04-14",
  "code-execution-2025-08-25",
  "mcp-client-2025-04-04",
  "web-fetch-2025-09-10",
  "context-management-2025-06-27",
  "prompt-caching-scope-2026-01-05"
]

/**
 * POST /v1/messages, non-streamed, written on a raw socket so that a header name may repeat as
 * separate header lines; resolves with the status line's code and the rest of the answer.
 */
const post = (port: number, model: string, headers: ReadonlyArray<readonly [string, string]>): Promise<{ status: number; text: string }> =>
  new Promise((resolve, reject) => {
    const body = JSON.stringify({ model, max_tokens: 100, messages: [{ role: "user", content: "hi" }] })
    const lines = [
      "POST /v1/messages HTTP/1.1",
      `host: 127.0.0.1:${port}`,
      `x-api-key: ${KEY}`,
      "anthropic-version: 2023-06-01",
      "content-type: application/json",
      `content-length: ${Buffer.byteLength(body)}`,
      "connection: close",
      ...headers.map(([name, value]) => `${name}: ${value}`)
    ]
    const socket = net.connect(port, "127.0.0.1", () => socket.write(`${lines.join("\r\n")}\r\n\r\n${body}`))
    const chunks: Array<Buffer> = []
    socket.on("data", (c: Buffer) => chunks.push(c))
    socket.on("error", reject)
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8")
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text })
    })
  })

describe("Messages beta flags", () => {
  let messages: FakeMessagesUpstream
  let openai: FakeUpstream
  let gemini: FakeGeminiUpstream
  let gateway: TestGateway
  const sentBeta = () => messages.requests.at(-1)?.headers["anthropic-beta"]

  beforeAll(async () => {
    messages = await startFakeMessagesUpstream()
    openai = await startFakeUpstream()
    gemini = await startFakeGeminiUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "betas" }],
      providers: {
        ant: { type: "anthropic", baseUrl: messages.origin, apiKey: "k" },
        picky: { type: "anthropic", baseUrl: messages.origin, apiKey: "k", betas: ["context-1m-2025-08-07", "files-api-2025-04-14"] },
        operator: { type: "anthropic", baseUrl: messages.origin, apiKey: "k", headers: { "Anthropic-Beta": "operator-flag-2025-01-01, interleaved-thinking-2025-05-14" } },
        closed: { type: "anthropic", baseUrl: messages.origin, apiKey: "k", betas: [] },
        oai: { type: "openai", baseUrl: openai.url, apiKey: "k" },
        gem: { type: "gemini", baseUrl: gemini.origin, apiKey: "k" }
      }
    })
  })
  beforeEach(() => {
    messages.reset()
    openai.reset()
    gemini.reset()
  })
  afterAll(async () => {
    await gateway?.close()
    await Promise.all([messages?.close(), openai?.close(), gemini?.close()])
  })

  it("forwards only the default allow-list's flags of Claude Code's list", async () => {
    const reply = await post(gateway.port, "ant/claude-x", [["anthropic-beta", claudeCode.join(",")]])
    expect(reply.status, reply.text).toBe(200)
    expect(sentBeta()).toBe("interleaved-thinking-2025-05-14,context-1m-2025-08-07,fine-grained-tool-streaming-2025-05-14,token-efficient-tools-2025-02-19")
  })

  it("reads both spellings, repeated headers and spaces after commas", async () => {
    const reply = await post(gateway.port, "ant/claude-x", [
      ["anthropic-beta", "files-api-2025-04-14, interleaved-thinking-2025-05-14"],
      ["anthropic-beta", "context-1m-2025-08-07"],
      ["messages-beta", "token-efficient-tools-2025-02-19 ,interleaved-thinking-2025-05-14"]
    ])
    expect(reply.status, reply.text).toBe(200)
    expect(sentBeta()).toBe("interleaved-thinking-2025-05-14,context-1m-2025-08-07,token-efficient-tools-2025-02-19")
  })

  it("sends no anthropic-beta when no client flag is allowed and none is configured", async () => {
    await post(gateway.port, "ant/claude-x", [["anthropic-beta", "files-api-2025-04-14,claude-code-20250219"]])
    expect(sentBeta()).toBeUndefined()
    await post(gateway.port, "ant/claude-x", [])
    expect(sentBeta()).toBeUndefined()
    await post(gateway.port, "closed/claude-x", [["anthropic-beta", "interleaved-thinking-2025-05-14"]])
    expect(sentBeta()).toBeUndefined()
  })

  it("a configured list replaces the default one", async () => {
    await post(gateway.port, "picky/claude-x", [["anthropic-beta", claudeCode.join(",")]])
    expect(sentBeta()).toBe("context-1m-2025-08-07,files-api-2025-04-14")
  })

  it("merges with the operator's configured anthropic-beta, without repeating a flag", async () => {
    await post(gateway.port, "operator/claude-x", [["anthropic-beta", "interleaved-thinking-2025-05-14,context-1m-2025-08-07,files-api-2025-04-14"]])
    expect(sentBeta()).toBe("operator-flag-2025-01-01,interleaved-thinking-2025-05-14,context-1m-2025-08-07")
    const names = Object.keys(messages.requests.at(-1)?.headers ?? {}).filter((h) => h.toLowerCase() === "anthropic-beta")
    expect(names).toHaveLength(1)
    await post(gateway.port, "operator/claude-x", [])
    expect(sentBeta()).toBe("operator-flag-2025-01-01,interleaved-thinking-2025-05-14")
  })

  it("openai and gemini upstreams never get the header", async () => {
    const flags: Array<readonly [string, string]> = [["anthropic-beta", claudeCode.join(",")], ["messages-beta", "interleaved-thinking-2025-05-14"]]
    const viaOpenai = await post(gateway.port, "oai/gpt-x", flags)
    expect(viaOpenai.status, viaOpenai.text).toBe(200)
    const viaGemini = await post(gateway.port, "gem/gemini-x", flags)
    expect(viaGemini.status, viaGemini.text).toBe(200)
    expect(openai.requests).toHaveLength(1)
    expect(gemini.requests).toHaveLength(1)
    for (const request of [openai.requests[0], gemini.requests[0]]) {
      expect(Object.keys(request.headers).filter((h) => h.includes("beta"))).toEqual([])
    }
  })

  it("a bad betas value is a config error naming its path", () => {
    const decoded = decodeConfig({ providers: { ant: { type: "anthropic", baseUrl: "http://127.0.0.1:1", betas: ["ok-flag", "two,flags"] } } }, {})
    expect(Either.isLeft(decoded)).toBe(true)
    if (Either.isLeft(decoded)) expect(decoded.left.problems.join("\n")).toMatch(/providers\.ant\.betas\.1/)
    const notList = decodeConfig({ providers: { ant: { type: "anthropic", baseUrl: "http://127.0.0.1:1", betas: "interleaved-thinking-2025-05-14" } } }, {})
    expect(Either.isLeft(notList)).toBe(true)
    if (Either.isLeft(notList)) expect(notList.left.problems.join("\n")).toMatch(/providers\.ant\.betas/)
  })
})
