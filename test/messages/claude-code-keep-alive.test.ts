/**
 * Claude Code reads the gateway's keep-alive comments as nothing (issue 26). A native Messages
 * upstream starts its answer, then stays silent for 3 s before finishing it; the gateway
 * (`streamKeepAliveMs: 500`) fills the silence with SSE comments. Claude Code's one stream must
 * complete with the whole text, not be retried or broken by the comments.
 *
 * What was learnt from Claude Code 2.1.197 (see the README's "Coding agents"): its byte-level
 * watchdog, which any byte (a comment too) resets, is on only for Anthropic's own API host, and its
 * event-level idle abort (5 minutes, `CLAUDE_STREAM_IDLE_TIMEOUT_MS` raises it) counts only content
 * events: neither comments nor `ping` events reset it.
 */
import { createServer, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode } from "../support/ClaudeCode.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-claude-code-keep-alive"
const PROMPT = "KEEPALIVE-PROMPT say hello"
const SILENCE_MS = 3_000

let upstream: Server
let base: string
let gateway: TestGateway
/** the requests for the prompt's turn the upstream answered (a stream, or the non-streamed retry after a cut stream) */
let promptTurns = 0
const open = new Set<ServerResponse>()

const sse = (res: ServerResponse, type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)

const answer = async (res: ServerResponse, body: string) => {
  const slow = body.includes("KEEPALIVE-PROMPT") && body.includes('"stream":true')
  if (body.includes("KEEPALIVE-PROMPT")) promptTurns++
  open.add(res)
  res.on("close", () => open.delete(res))
  const streamed = body.includes('"stream":true')
  if (!streamed) {
    res.writeHead(200, { "content-type": "application/json" })
    res.end(JSON.stringify({ id: "msg_w", type: "message", role: "assistant", model: "claude-haiku-4-5", content: [{ type: "text", text: "Hello world" }], stop_reason: "end_turn", usage: { input_tokens: 5, output_tokens: 2 } }))
    return
  }
  res.writeHead(200, { "content-type": "text/event-stream" })
  sse(res, "message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-haiku-4-5", content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 0 } } })
  sse(res, "content_block_start", { index: 0, content_block: { type: "text", text: "" } })
  sse(res, "content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello" } })
  if (slow) await new Promise((resolve) => setTimeout(resolve, SILENCE_MS))
  if (res.destroyed) return
  sse(res, "content_block_delta", { index: 0, delta: { type: "text_delta", text: " world" } })
  sse(res, "content_block_stop", { index: 0 })
  sse(res, "message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 2 } })
  sse(res, "message_stop", {})
  res.end()
}

beforeAll(async () => {
  upstream = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      if (req.method !== "POST" || !(req.url ?? "").startsWith("/v1/messages")) {
        res.writeHead(404).end()
        return
      }
      void answer(res, Buffer.concat(chunks).toString("utf8"))
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  gateway = await startGateway({
    keys: [{ key: KEY, app: "claude-code" }],
    providers: { ant: { type: "anthropic", baseUrl: base, apiKey: "upstream-key" } },
    aliases: { "claude-*": "ant/claude-*" },
    streamKeepAliveMs: 500
  })
})

afterEach(async () => {
  await disposeAllClaudeCode()
})

afterAll(async () => {
  await gateway?.close()
  for (const res of open) res.destroy()
  await new Promise<void>((resolve) => upstream?.close(() => resolve()))
})

describe("Claude Code and keep-alive comments", () => {
  it("completes the one stream whose silence the gateway filled with comments", async () => {
    promptTurns = 0
    const through = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: PROMPT, model: "claude-haiku-4-5", timeoutMs: 120_000 })
    try {
      expect(through.exitCode, describeClaudeCodeRun(through)).toBe(0)
      expect(through.resultText, describeClaudeCodeRun(through)).toBe("Hello world")
      expect(promptTurns, describeClaudeCodeRun(through)).toBe(1)
    } finally {
      await through.dispose()
    }
  }, 180_000)
})
