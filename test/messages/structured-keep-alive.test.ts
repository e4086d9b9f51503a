/**
 * A structured answer held back on a Messages stream carries keep-alives (issue 26). Messages
 * writes a missing structured answer as an error event in the stream (spec 4.2), so its stream
 * commits at the upstream's first event and the held answer's wait is filled with SSE comments
 * (`streamKeepAliveMs: 100`, the upstream pausing 0.5 s while it sends the `respond` call). The
 * answer itself is the same one text block as without the pause; a missing answer is the error
 * event after the keep-alives, with no `message_stop`. What is asserted is the mechanism: comments
 * between `message_start` and the answer, none before the first event.
 */
import { createServer, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const PAUSE_MS = 500
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

let upstream: Server
let gw: TestGateway

/**
 * A native Messages stream: a word of preamble, then the `respond` call in two halves with a silent
 * pause between (or, `missing`, plain text with a pause). The stream begins at the preamble: a call
 * that opened the answer would reach the gateway whole, its wait before the stream begins.
 */
const answer = async (res: ServerResponse, missing: boolean) => {
  const event = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  event("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "m", content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 0 } } })
  if (missing) {
    event("content_block_start", { index: 0, content_block: { type: "text", text: "" } })
    event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Let me think" } })
    await sleep(PAUSE_MS)
    event("content_block_delta", { index: 0, delta: { type: "text_delta", text: " about it." } })
    event("content_block_stop", { index: 0 })
    event("message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 4 } })
  } else {
    event("content_block_start", { index: 0, content_block: { type: "text", text: "" } })
    event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Checking." } })
    event("content_block_stop", { index: 0 })
    event("content_block_start", { index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "respond", input: {} } })
    event("content_block_delta", { index: 1, delta: { type: "input_json_delta", partial_json: '{"verdict":' } })
    await sleep(PAUSE_MS)
    event("content_block_delta", { index: 1, delta: { type: "input_json_delta", partial_json: '"yes"}' } })
    event("content_block_stop", { index: 1 })
    event("message_delta", { delta: { stop_reason: "tool_use" }, usage: { output_tokens: 6 } })
  }
  event("message_stop", {})
  res.end()
}

beforeAll(async () => {
  upstream = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      void answer(res, Buffer.concat(chunks).toString("utf8").includes("no-answer"))
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  gw = await startGateway({ providers: { ant: { type: "anthropic", baseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` } }, streamKeepAliveMs: 100 })
})

afterAll(async () => {
  await gw?.close()
  await new Promise<void>((resolve) => upstream?.close(() => resolve()))
})

const structured = async (prompt: string) => {
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify({
      model: "ant/m",
      stream: true,
      max_tokens: 100,
      messages: [{ role: "user", content: prompt }],
      output_config: { format: { type: "json_schema", schema: { type: "object", properties: { verdict: { type: "string" } }, required: ["verdict"] } } }
    }),
    signal: AbortSignal.timeout(15_000)
  })
  expect(res.status).toBe(200)
  return res.text()
}

const comments = (text: string) => (text.match(/^: keep-alive\n\n/gm) ?? []).length

describe("a structured answer held back on a Messages stream", () => {
  it("keep-alives fill the wait between message_start and the answer, which is one text block", async () => {
    const text = await structured("Is it so?")
    const startAt = text.indexOf("event: message_start")
    const answerAt = text.indexOf('{\\"verdict\\":\\"yes\\"}')
    expect(startAt, text).toBe(0)
    expect(answerAt, text).toBeGreaterThan(startAt)
    expect(comments(text.slice(0, startAt))).toBe(0)
    expect(comments(text.slice(startAt, answerAt)), text).toBeGreaterThanOrEqual(2)
    const clean = text.replace(/^: keep-alive\n\n/gm, "")
    expect((clean.match(/"type":"text_delta"/g) ?? []).length).toBe(1)
    expect(clean).toContain('"stop_reason":"end_turn"')
    expect(clean).toContain("event: message_stop")
    expect(clean).not.toContain("respond")
    expect(clean).not.toContain("Checking.")
  })

  it("a missing answer is the error event after the keep-alives, with no message_stop", async () => {
    const text = await structured("no-answer please")
    const errorAt = text.indexOf("event: error")
    expect(errorAt, text).toBeGreaterThan(0)
    expect(comments(text.slice(0, errorAt)), text).toBeGreaterThanOrEqual(2)
    expect(text).not.toContain("event: message_stop")
    expect(text).not.toContain("Let me think")
  })
})
