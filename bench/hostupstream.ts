/**
 * The fake upstream of `npm run bench -- --host-tools` (bench/hosttools.ts), run as its own process:
 * `node bench/.build/hostupstream.js` prints `listening on http://127.0.0.1:PORT`.
 *
 * `POST /v1/chat/completions`, answered at once and without state (what to answer is read from the
 * request itself):
 *
 * - the last message is a `tool` message (the second model call of a host-tool request): the ~440-byte
 *   `chat.completion` of bench/upstream.ts (text `COMPLETION_TEXT`); the request is checked to carry
 *   the assistant's call of the first answer and, paired with its id, the fake MCP server's result
 *   (a request that does not is counted as `bad`);
 * - else, the request offers a tool named `<server>__lookup` (a host tool): an answer that calls it
 *   (`finish_reason: tool_calls`, no text);
 * - else (the app without host tools): the same text completion.
 *
 * `GET /bench/stats`: the requests so far by kind (`first`, `second`, `plain`) and `bad`, with what
 * the last bad one lacked.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { COMPLETION_TEXT, LOOKUP_QUERY as QUERY, lookupText } from "./protocols.js"
const CALL_ID_PREFIX = "call_bench_"

let counter = 0
const created = () => Math.floor(Date.now() / 1000)
const usage = { prompt_tokens: 9, completion_tokens: 9, total_tokens: 18, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 } }

const completion = (model: string) =>
  JSON.stringify({
    id: `chatcmpl-bench${(++counter).toString(36).padStart(8, "0")}`,
    object: "chat.completion",
    created: created(),
    model,
    choices: [{ index: 0, message: { role: "assistant", content: COMPLETION_TEXT, refusal: null }, logprobs: null, finish_reason: "stop" }],
    usage
  })

const toolCall = (model: string, tool: string) => {
  const n = ++counter
  return JSON.stringify({
    id: `chatcmpl-bench${n.toString(36).padStart(8, "0")}`,
    object: "chat.completion",
    created: created(),
    model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: null, refusal: null, tool_calls: [{ id: `${CALL_ID_PREFIX}${n}`, type: "function", function: { name: tool, arguments: JSON.stringify({ query: QUERY }) } }] },
        logprobs: null,
        finish_reason: "tool_calls"
      }
    ],
    usage
  })
}

interface ChatMessage {
  readonly role?: unknown
  readonly content?: unknown
  readonly tool_call_id?: unknown
  readonly tool_calls?: ReadonlyArray<{ readonly id?: unknown; readonly function?: { readonly name?: unknown; readonly arguments?: unknown } }>
}

const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content.map((p: unknown) => (typeof p === "object" && p !== null && typeof (p as { text?: unknown }).text === "string" ? (p as { text: string }).text : "")).join("")
      : ""

/** why the second call of a host-tool request is not what the loop should send (undefined: it is) */
const secondProblem = (messages: ReadonlyArray<ChatMessage>): string | undefined => {
  const result = messages[messages.length - 1]
  const call = messages[messages.length - 2]
  if (call?.role !== "assistant" || !Array.isArray(call.tool_calls) || call.tool_calls.length !== 1) return "no assistant message with one tool call before the tool result"
  const c = call.tool_calls[0]
  if (typeof c.id !== "string" || !c.id.startsWith(CALL_ID_PREFIX)) return "the tool call's id is not the upstream's"
  if (typeof c.function?.arguments !== "string" || JSON.parse(c.function.arguments).query !== QUERY) return "the tool call's arguments are not the upstream's"
  if (result.tool_call_id !== c.id) return "the tool result is not paired with the call's id"
  if (!textOf(result.content).includes(lookupText(QUERY))) return "the tool result is not the MCP server's text"
  return undefined
}

const stats = { requests: 0, first: 0, second: 0, plain: 0, bad: 0, lastBad: "" }

const json = (res: http.ServerResponse, status: number, body: string) => {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const server = http.createServer((req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", () => {
    const pathname = (req.url ?? "/").split("?")[0]
    if (req.method === "GET" && pathname === "/bench/stats") return json(res, 200, JSON.stringify(stats))
    if (req.method !== "POST" || pathname !== "/v1/chat/completions") return json(res, 404, `{"error":{"message":"not found","type":"invalid_request_error"}}`)
    stats.requests++
    let body: { model?: unknown; messages?: unknown; tools?: unknown }
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as typeof body
    } catch {
      return json(res, 400, `{"error":{"message":"body is not JSON","type":"invalid_request_error"}}`)
    }
    if (typeof body.model !== "string" || !Array.isArray(body.messages) || body.messages.length === 0) {
      return json(res, 400, `{"error":{"message":"model (string) and messages (non-empty array) are required","type":"invalid_request_error"}}`)
    }
    const messages = body.messages as ReadonlyArray<ChatMessage>
    if (messages[messages.length - 1]?.role === "tool") {
      stats.second++
      const problem = secondProblem(messages)
      if (problem !== undefined) {
        stats.bad++
        stats.lastBad = problem
      }
      return json(res, 200, completion(body.model))
    }
    const tools = Array.isArray(body.tools) ? (body.tools as ReadonlyArray<{ readonly function?: { readonly name?: unknown } }>) : []
    const lookup = tools.map((t) => t.function?.name).find((name): name is string => typeof name === "string" && name.endsWith("__lookup"))
    if (lookup !== undefined) {
      stats.first++
      return json(res, 200, toolCall(body.model, lookup))
    }
    stats.plain++
    json(res, 200, completion(body.model))
  })
})
server.keepAliveTimeout = 120_000
server.headersTimeout = 130_000
server.requestTimeout = 0
server.maxConnections = 100_000
server.listen(0, "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`))
const stop = () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
  setTimeout(() => process.exit(0), 500).unref()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
