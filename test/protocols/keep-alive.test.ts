/**
 * Keep-alive on every protocol once a stream has begun (issue 26, spec rule 1.7): an upstream
 * that starts its answer, then goes quiet while it sends a tool call piece by piece (passed on
 * whole, spec 1.4) — silent, or only pinging — must not leave the client without bytes. The
 * gateway runs with `streamKeepAliveMs: 100`; the upstreams pause for 0.5 s in the middle of the
 * call. What is asserted is the mechanism: keep-alives (an SSE comment; a blank line on Gemini's
 * SSE form; a newline in its JSON array) between the text and the tool call, none before the
 * first model event, and the answer otherwise the same as without the pause.
 */
import { createServer, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const PAUSE_MS = 500
const ARGS = ['{"path":', '"notes.txt"}']

let upstream: Server
let gw: TestGateway
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** chat completions: text, the call's first half, a silent pause, the rest */
const chatStream = async (res: ServerResponse) => {
  const frame = (delta: unknown, finish: string | null = null) =>
    res.write(`data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`)
  frame({ role: "assistant", content: "Reading it." })
  frame({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "read_file", arguments: ARGS[0] } }] })
  await sleep(PAUSE_MS)
  frame({ tool_calls: [{ index: 0, function: { arguments: ARGS[1] } }] })
  frame({}, "tool_calls")
  res.end("data: [DONE]\n\n")
}

/** Messages: text, the call's first half, pings only during the pause, the rest */
const messagesStream = async (res: ServerResponse) => {
  const event = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  event("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "m", content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 0 } } })
  event("content_block_start", { index: 0, content_block: { type: "text", text: "" } })
  event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Reading it." } })
  event("content_block_stop", { index: 0 })
  event("content_block_start", { index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "read_file", input: {} } })
  event("content_block_delta", { index: 1, delta: { type: "input_json_delta", partial_json: ARGS[0] } })
  for (let waited = 0; waited < PAUSE_MS; waited += 250) {
    event("ping", {})
    await sleep(250)
  }
  event("content_block_delta", { index: 1, delta: { type: "input_json_delta", partial_json: ARGS[1] } })
  event("content_block_stop", { index: 1 })
  event("message_delta", { delta: { stop_reason: "tool_use" }, usage: { output_tokens: 9 } })
  event("message_stop", {})
  res.end()
}

beforeAll(async () => {
  upstream = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      void (req.url?.startsWith("/v1/messages") ? messagesStream(res) : chatStream(res))
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  gw = await startGateway({
    providers: { oai: { type: "openai", baseUrl: `${base}/v1` }, ant: { type: "anthropic", baseUrl: base } },
    streamKeepAliveMs: 100
  })
})

afterAll(async () => {
  await gw?.close()
  await new Promise<void>((resolve) => upstream?.close(() => resolve()))
})

const TOOL = { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } }

type Form = "chat" | "responses" | "messages" | "gemini-sse" | "gemini-array"
const request = (form: Form, model: string): { path: string; body: unknown } => {
  switch (form) {
    case "chat":
      return { path: "/v1/chat/completions", body: { model, stream: true, messages: [{ role: "user", content: "read notes" }], tools: [{ type: "function", function: TOOL }] } }
    case "responses":
      return { path: "/v1/responses", body: { model, stream: true, store: false, input: "read notes", tools: [{ type: "function", ...TOOL }] } }
    case "messages":
      return { path: "/v1/messages", body: { model, stream: true, max_tokens: 100, messages: [{ role: "user", content: "read notes" }], tools: [{ name: TOOL.name, description: TOOL.description, input_schema: TOOL.parameters }] } }
    case "gemini-sse":
    case "gemini-array":
      return {
        path: `/v1beta/models/${model}:streamGenerateContent${form === "gemini-sse" ? "?alt=sse" : ""}`,
        body: { contents: [{ role: "user", parts: [{ text: "read notes" }] }], tools: [{ functionDeclarations: [TOOL] }] }
      }
  }
}

/** the body as it arrived, in the pieces the socket delivered */
const read = async (form: Form, model: string): Promise<Array<string>> => {
  const { body, path } = request(form, model)
  const res = await fetch(`${gw.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(15_000) })
  expect(res.status).toBe(200)
  const pieces: Array<string> = []
  const decoder = new TextDecoder()
  for await (const piece of res.body as AsyncIterable<Uint8Array>) pieces.push(decoder.decode(piece, { stream: true }))
  return pieces
}

/** where the keep-alives of a form are in its body: SSE comments, or blank lines / newlines outside frames */
const keepAlives = (form: Form, text: string): number => {
  // each frame ends in two CRLFs after its JSON; every other CRLF is a keep-alive
  if (form === "gemini-sse") return (text.replace(/\}\r\n\r\n/g, "}").match(/\r\n/g) ?? []).length
  if (form === "gemini-array") return (text.match(/\}\n/g) ?? []).length + (text.match(/\n\n/g) ?? []).length
  return (text.match(/^: keep-alive\n\n/gm) ?? []).length
}

/** the body with every keep-alive taken out */
const withoutKeepAlives = (form: Form, text: string): string => {
  if (form === "gemini-sse") return text.replace(/\r\n(?=\r\n)/g, (m, at: number) => (text.slice(at - 2, at) === "\r\n" ? "" : m))
  if (form === "gemini-array") return text.replace(/\n/g, (m, at: number) => (text[at - 1] === "\r" ? m : ""))
  return text.replace(/^: keep-alive\n\n/gm, "")
}

const FORMS: ReadonlyArray<Form> = ["chat", "responses", "messages", "gemini-sse", "gemini-array"]

describe("keep-alive while a tool call is assembled", () => {
  for (const [upstreamKind, model] of [["silent chat-completions", "oai/m"], ["pinging Messages", "ant/m"]] as const) {
    for (const form of FORMS) {
      it(`${form}, from a ${upstreamKind} upstream: keep-alives between the text and the call, none before the first event`, async () => {
        const pieces = await read(form, model)
        const text = pieces.join("")
        // (a Responses stream names the tool in its response object first: the call is its output item)
        const callAt = form === "responses" ? text.indexOf('"type":"function_call"') : text.indexOf("read_file")
        const textAt = text.indexOf("Reading it.")
        expect(textAt, text).toBeGreaterThanOrEqual(0)
        expect(callAt, text).toBeGreaterThan(textAt)
        // nothing before the first event: the body opens with the answer, not a keep-alive
        expect(keepAlives(form, text.slice(0, textAt)), text).toBe(0)
        // during the pause: several keep-alives (one per 100 ms of silence)
        expect(keepAlives(form, text.slice(textAt, callAt)), text).toBeGreaterThanOrEqual(2)
        // the call reached the client whole, and the rest of the answer is untouched by them
        const clean = withoutKeepAlives(form, text)
        expect(clean).toContain("Reading it.")
        expect(clean.replace(/\\/g, "")).toContain('"path":"notes.txt"')
        if (form === "gemini-array") expect(() => JSON.parse(text)).not.toThrow()
      })
    }
  }
})
