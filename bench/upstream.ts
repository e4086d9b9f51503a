/**
 * The fake upstream of the comparison (bench/contest.ts), run as its own process:
 * `node --import tsx bench/upstream.ts` prints `listening on http://127.0.0.1:PORT`.
 *
 * `POST /v1/chat/completions` answers at once: a ~400-byte `chat.completion` with usage, or with
 * `stream: true` 20 SSE chunks (role, 18 text pieces, finish + usage) then `data: [DONE]`.
 * A model named `bench-hold` (any provider prefix) is a slow stream: its first chunk goes out at
 * once, then one small text chunk every HOLD_TICK_MS until `POST /bench/release`, then the rest and
 * `[DONE]`; after a release, new `bench-hold` streams are answered at once until `POST /bench/hold`.
 *
 * `GET /bench/stats` reports the streams held open now, the number of requests so far (the harness
 * waits for it to stop moving after a job: a saturated contestant may still be working through its
 * backlog) and what the last request carried (number of messages, characters of text content, body
 * bytes), so the harness can check that a contestant forwarded a conversation or a body whole.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { CHUNK_TEXTS, COMPLETION_TEXT } from "./protocols.js"

const HOLD_TICK_MS = 500

let counter = 0
const id = () => `chatcmpl-bench${(++counter).toString(36).padStart(8, "0")}`
const created = () => Math.floor(Date.now() / 1000)
const usage = { prompt_tokens: 9, completion_tokens: 9, total_tokens: 18, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 } }

const completion = (model: string) =>
  JSON.stringify({
    id: id(),
    object: "chat.completion",
    created: created(),
    model,
    choices: [{ index: 0, message: { role: "assistant", content: COMPLETION_TEXT, refusal: null }, logprobs: null, finish_reason: "stop" }],
    usage
  })

const chunk = (base: { id: string; created: number; model: string }, delta: Record<string, unknown>, finish: string | null, withUsage = false) =>
  `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(withUsage ? { usage } : {}) })}\n\n`

/** the 20 chunks of an instant stream: role + first piece, 18 more pieces, finish with usage */
const streamChunks = (model: string) => {
  const base = { id: id(), created: created(), model }
  const out = [chunk(base, { role: "assistant", content: CHUNK_TEXTS[0] }, null)]
  for (let i = 1; i < CHUNK_TEXTS.length; i++) out.push(chunk(base, { content: CHUNK_TEXTS[i] }, null))
  out.push(chunk(base, {}, "stop", true))
  return { base, out }
}

interface Held {
  readonly res: http.ServerResponse
  readonly timer: NodeJS.Timeout
  readonly finish: () => void
}
const held = new Set<Held>()
let holding = true
let last = { messages: 0, contentChars: 0, bodyBytes: 0 }
/** chat-completions requests received so far: the harness waits for it to stop moving between jobs */
let requests = 0

const sseHead = { "content-type": "text/event-stream", "cache-control": "no-cache" }

const stream = (res: http.ServerResponse, model: string) => {
  res.writeHead(200, sseHead)
  for (const c of streamChunks(model).out) res.write(c)
  res.end("data: [DONE]\n\n")
}

const hold = (res: http.ServerResponse, model: string) => {
  const { base, out } = streamChunks(model)
  res.writeHead(200, sseHead)
  res.write(out[0])
  const timer = setInterval(() => res.write(chunk(base, { content: "." }, null)), HOLD_TICK_MS)
  const entry: Held = {
    res,
    timer,
    finish: () => {
      clearInterval(timer)
      held.delete(entry)
      for (const c of out.slice(1)) res.write(c)
      res.end("data: [DONE]\n\n")
    }
  }
  held.add(entry)
  res.on("close", () => {
    clearInterval(timer)
    held.delete(entry)
  })
}

const textLength = (content: unknown): number => {
  if (typeof content === "string") return content.length
  if (Array.isArray(content)) return content.reduce((n: number, part: unknown) => n + (typeof part === "object" && part !== null && typeof (part as { text?: unknown }).text === "string" ? (part as { text: string }).text.length : 0), 0)
  return 0
}

const json = (res: http.ServerResponse, status: number, body: string) => {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const server = http.createServer((req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", () => {
    const pathname = (req.url ?? "/").split("?")[0]
    if (req.method === "GET" && pathname === "/bench/stats") return json(res, 200, JSON.stringify({ held: held.size, holding, requests, last }))
    if (req.method === "POST" && pathname === "/bench/release") {
      holding = false
      const n = held.size
      for (const h of [...held]) h.finish()
      return json(res, 200, JSON.stringify({ released: n }))
    }
    if (req.method === "POST" && pathname === "/bench/hold") {
      holding = true
      return json(res, 200, "{}")
    }
    if (req.method !== "POST" || pathname !== "/v1/chat/completions") return json(res, 404, `{"error":{"message":"not found","type":"invalid_request_error"}}`)
    requests++
    const raw = Buffer.concat(chunks)
    let body: { model?: unknown; stream?: unknown; messages?: unknown }
    try {
      body = JSON.parse(raw.toString("utf8")) as typeof body
    } catch {
      return json(res, 400, `{"error":{"message":"body is not JSON","type":"invalid_request_error"}}`)
    }
    if (typeof body.model !== "string" || !Array.isArray(body.messages) || body.messages.length === 0) {
      return json(res, 400, `{"error":{"message":"model (string) and messages (non-empty array) are required","type":"invalid_request_error"}}`)
    }
    const messages = body.messages as Array<{ content?: unknown }>
    last = { messages: messages.length, contentChars: messages.reduce((n, m) => n + textLength(m?.content), 0), bodyBytes: raw.length }
    if (body.stream === true) {
      if (body.model.endsWith("bench-hold") && holding) hold(res, body.model)
      else stream(res, body.model)
    } else json(res, 200, completion(body.model))
  })
})
// keep the contestants' idle keep-alive sockets open between rounds
server.keepAliveTimeout = 120_000
server.headersTimeout = 130_000
server.requestTimeout = 0
server.maxConnections = 100_000
server.listen(0, "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`))
const stop = () => {
  for (const h of held) clearInterval(h.timer)
  server.closeAllConnections()
  server.close(() => process.exit(0))
  setTimeout(() => process.exit(0), 500).unref()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
