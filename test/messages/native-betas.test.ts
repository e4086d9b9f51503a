/**
 * Messages beta flags (`anthropic-beta`, `messages-beta`): a native (`anthropic`) upstream gets
 * every client flag except those on the deny-list (the default one, or
 * `providers.<name>.denyBetas`), merged with the operator's configured `anthropic-beta`; openai and
 * gemini upstreams never get the header.
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
        picky: { type: "anthropic", baseUrl: messages.origin, apiKey: "k", denyBetas: ["context-1m", "claude-code-20250219", "fine-grained-tool-streaming-2025-01-01"] },
        operator: { type: "anthropic", baseUrl: messages.origin, apiKey: "k", headers: { "Anthropic-Beta": "operator-flag-2025-01-01, interleaved-thinking-2025-05-14" } },
        open: { type: "anthropic", baseUrl: messages.origin, apiKey: "k", denyBetas: [] },
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

  it("forwards every flag of Claude Code's list except the default deny-list's (OAuth, Files API, code execution, MCP client, web fetch)", async () => {
    const reply = await post(gateway.port, "ant/claude-x", [["anthropic-beta", claudeCode.join(",")]])
    expect(reply.status, reply.text).toBe(200)
    expect(sentBeta()).toBe(
      "claude-code-20250219,interleaved-thinking-2025-05-14,context-1m-2025-08-07,fine-grained-tool-streaming-2025-05-14,token-efficient-tools-2025-02-19,context-management-2025-06-27,prompt-caching-scope-2026-01-05"
    )
  })

  it("a deny entry is a flag family: a later date of a denied flag is held back, a flag that only starts alike is not", async () => {
    await post(gateway.port, "ant/claude-x", [["anthropic-beta", "oauth-2031-01-01,skills-2025-10-02,oauthless-2025-01-01,computer-use-2025-01-24,code-executions-2026-01-01"]])
    expect(sentBeta()).toBe("oauthless-2025-01-01,code-executions-2026-01-01")
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

  it("sends no anthropic-beta when every client flag is denied and none is configured", async () => {
    await post(gateway.port, "ant/claude-x", [["anthropic-beta", "files-api-2025-04-14,oauth-2025-04-20"]])
    expect(sentBeta()).toBeUndefined()
    await post(gateway.port, "ant/claude-x", [])
    expect(sentBeta()).toBeUndefined()
  })

  it("a configured deny-list replaces the default one; an empty one forwards every flag", async () => {
    await post(gateway.port, "picky/claude-x", [["anthropic-beta", claudeCode.join(",")]])
    // context-1m denied as a family, claude-code by its dated name; a dated entry holds back only that date
    expect(sentBeta()).toBe(claudeCode.filter((f) => f !== "context-1m-2025-08-07" && f !== "claude-code-20250219").join(","))
    // a dated entry is that flag alone, never a family: a longer name that starts with it is forwarded
    await post(gateway.port, "picky/claude-x", [["anthropic-beta", "claude-code-20250219,claude-code-20250219-preview,context-1m-2026-01-01"]])
    expect(sentBeta()).toBe("claude-code-20250219-preview")
    await post(gateway.port, "open/claude-x", [["anthropic-beta", claudeCode.join(",")]])
    expect(sentBeta()).toBe(claudeCode.join(","))
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

  it("a bad denyBetas value is a config error naming its path; the old betas allow-list is refused saying what replaced it", () => {
    const decoded = decodeConfig({ providers: { ant: { type: "anthropic", baseUrl: "http://127.0.0.1:1", denyBetas: ["ok-flag", "two,flags"] } } }, {})
    expect(Either.isLeft(decoded)).toBe(true)
    if (Either.isLeft(decoded)) expect(decoded.left.problems.join("\n")).toMatch(/providers\.ant\.denyBetas\.1/)
    const notList = decodeConfig({ providers: { ant: { type: "anthropic", baseUrl: "http://127.0.0.1:1", denyBetas: "oauth" } } }, {})
    expect(Either.isLeft(notList)).toBe(true)
    if (Either.isLeft(notList)) expect(notList.left.problems.join("\n")).toMatch(/providers\.ant\.denyBetas/)
    const old = decodeConfig({ providers: { ant: { type: "anthropic", baseUrl: "http://127.0.0.1:1", betas: ["interleaved-thinking-2025-05-14"] } } }, {})
    expect(Either.isLeft(old)).toBe(true)
    if (Either.isLeft(old)) expect(old.left.problems).toEqual([expect.stringMatching(/^providers\.ant\.betas: replaced by denyBetas/)])
  })
})
