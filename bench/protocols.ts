/**
 * The four protocols of the comparison: how a request of each looks (path, headers, body) and how a
 * whole answer is recognised. Shared by the orchestrator (bench/contest.ts), the load generator
 * (bench/loader.ts, which checks every answer with `verify`) and the fake upstream.
 */

/** the text of the upstream's non-streamed answer */
export const COMPLETION_TEXT = "Hello! How can I help you today?"
/** the text pieces of the upstream's 20-chunk stream (chunks 1..19; chunk 20 is finish + usage) */
export const CHUNK_TEXTS: ReadonlyArray<string> = Array.from({ length: 19 }, (_, i) => `piece${String(i).padStart(2, "0")} `)
export const STREAM_TEXT = CHUNK_TEXTS.join("")
/** the text of the held (slow) stream's keep-alive chunks, removed before comparing */
export const HOLD_TICK_TEXT = "."

/** `--host-tools` (bench/hosttools.ts): what the model asks the fake MCP server's `lookup` tool */
export const LOOKUP_QUERY = "weather in Paris"
/** ...and what the tool answers: the query and ~170 bytes of fixed text */
export const lookupText = (query: string) =>
  `Result for "${query}": the weather in Paris is mild today, 18 degrees Celsius with light wind from the west and a few clouds in the afternoon; no rain is expected before the evening.`

export type Protocol = "chat" | "responses" | "messages" | "gemini"

export interface Message {
  readonly role: "user" | "assistant"
  readonly text: string
}

export interface RequestSpec {
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

export interface RequestOptions {
  readonly model: string
  readonly stream: boolean
  readonly messages: ReadonlyArray<Message>
  /** Responses only */
  readonly store?: boolean
  readonly previousResponseId?: string
  /** extra headers (the peer gateway's routing headers) */
  readonly headers?: Readonly<Record<string, string>>
}

const json = { "content-type": "application/json" }

/** A request of `protocol`; `messages` end with a user message. */
export const buildRequest = (protocol: Protocol, o: RequestOptions): RequestSpec => {
  const extra = o.headers ?? {}
  switch (protocol) {
    case "chat":
      return {
        path: "/v1/chat/completions",
        headers: { ...json, authorization: "Bearer sk-bench-0123456789", ...extra },
        body: JSON.stringify({ model: o.model, messages: o.messages.map((m) => ({ role: m.role, content: m.text })), ...(o.stream ? { stream: true } : {}) })
      }
    case "responses":
      return {
        path: "/v1/responses",
        headers: { ...json, ...extra },
        body: JSON.stringify({
          model: o.model,
          input: o.messages.length === 1 && o.messages[0].role === "user" ? o.messages[0].text : o.messages.map((m) => ({ role: m.role, content: m.text })),
          store: o.store ?? false,
          ...(o.previousResponseId !== undefined ? { previous_response_id: o.previousResponseId } : {}),
          ...(o.stream ? { stream: true } : {})
        })
      }
    case "messages":
      return {
        path: "/v1/messages",
        headers: { ...json, "anthropic-version": "2023-06-01", ...extra },
        body: JSON.stringify({ model: o.model, max_tokens: 1024, messages: o.messages.map((m) => ({ role: m.role, content: m.text })), ...(o.stream ? { stream: true } : {}) })
      }
    case "gemini":
      return {
        path: `/v1beta/models/${o.model}:${o.stream ? "streamGenerateContent?alt=sse" : "generateContent"}`,
        headers: { ...json, ...extra },
        body: JSON.stringify({ contents: o.messages.map((m) => ({ role: m.role === "user" ? "user" : "model", parts: [{ text: m.text }] })) })
      }
  }
}

/** `n` messages of ~`chars` characters each, alternating, the last one from the user */
export const conversation = (n: number, chars = 100): Array<Message> =>
  Array.from({ length: n }, (_, i) => {
    const role = (n - 1 - i) % 2 === 0 ? "user" : "assistant"
    const head = `message ${i} of ${n} (${role}): `
    return { role, text: head + filler(Math.max(0, chars - head.length)) }
  })

const LOREM = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
/** `chars` characters of plain ASCII text (no JSON escapes) */
export const filler = (chars: number) => LOREM.repeat(Math.ceil(chars / LOREM.length)).slice(0, chars)

// ---------------------------------------------------------------------------------------------
// whole-answer checks
// ---------------------------------------------------------------------------------------------

export interface CheckSpec {
  readonly protocol: Protocol
  readonly stream: boolean
  /** a held (slow) stream: keep-alive pieces are dropped before the text is compared */
  readonly held?: boolean
}

type J = Record<string, unknown>
const obj = (v: unknown): J | undefined => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as J) : undefined)
const arr = (v: unknown): Array<unknown> => (Array.isArray(v) ? v : [])
const str = (v: unknown): string => (typeof v === "string" ? v : "")

interface SseEvent {
  readonly event: string | undefined
  readonly data: string
}

/** SSE events of a whole body; `undefined` unless it ends with a blank line (a cut body does not) */
export const parseSse = (body: string): Array<SseEvent> | undefined => {
  const text = body.replace(/\r\n/g, "\n")
  if (!text.endsWith("\n\n")) return undefined
  const events: Array<SseEvent> = []
  for (const block of text.split("\n\n")) {
    if (block.trim() === "") continue
    let event: string | undefined
    const data: Array<string> = []
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue
      if (line.startsWith("event:")) event = line.slice(6).trim()
      else if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5))
    }
    if (data.length > 0 || event !== undefined) events.push({ event, data: data.join("\n") })
  }
  return events
}

const parse = (s: string): J | undefined => {
  try {
    return obj(JSON.parse(s))
  } catch {
    return undefined
  }
}

/** every data frame parsed as JSON (false if one is not) */
const frames = (events: ReadonlyArray<SseEvent>): Array<J> | undefined => {
  const out: Array<J> = []
  for (const e of events) {
    const j = parse(e.data)
    if (j === undefined) return undefined
    out.push(j)
  }
  return out
}

const expectedText = (stream: boolean) => (stream ? STREAM_TEXT : COMPLETION_TEXT)
const sameText = (got: string, c: CheckSpec) => (c.held ? got.split(HOLD_TICK_TEXT).join("") : got) === expectedText(c.stream)

/** The reason an answer is not whole and right, or undefined when it is. */
export const problemOf = (c: CheckSpec, body: string): string | undefined => {
  if (!c.stream) {
    const j = parse(body)
    if (j === undefined) return "not JSON"
    let text: string
    switch (c.protocol) {
      case "chat": {
        const choice = obj(arr(j.choices)[0])
        if (j.object !== "chat.completion" || choice?.finish_reason !== "stop") return "not a finished chat.completion"
        text = str(obj(choice.message)?.content)
        break
      }
      case "responses":
        if (j.object !== "response" || j.status !== "completed") return "not a completed response"
        text = arr(j.output)
          .flatMap((item) => arr(obj(item)?.content))
          .map((part) => (obj(part)?.type === "output_text" ? str(obj(part)?.text) : ""))
          .join("")
        break
      case "messages":
        if (j.type !== "message" || j.stop_reason !== "end_turn") return "not a finished message"
        text = arr(j.content)
          .map((b) => (obj(b)?.type === "text" ? str(obj(b)?.text) : ""))
          .join("")
        break
      case "gemini": {
        const candidate = obj(arr(j.candidates)[0])
        if (candidate?.finishReason !== "STOP") return "no candidate with finishReason STOP"
        text = arr(obj(candidate.content)?.parts)
          .map((p) => str(obj(p)?.text))
          .join("")
        break
      }
    }
    return sameText(text, c) ? undefined : `wrong text: ${JSON.stringify(text.slice(0, 80))}`
  }
  const events = parseSse(body)
  if (events === undefined || events.length === 0) return "stream cut (no final blank line)"
  switch (c.protocol) {
    case "chat": {
      if (events[events.length - 1].data !== "[DONE]") return "stream does not end with [DONE]"
      const chunks = frames(events.slice(0, -1))
      if (chunks === undefined) return "a chunk is not JSON"
      let finished = false
      let text = ""
      for (const ch of chunks) {
        const choice = obj(arr(ch.choices)[0])
        text += str(obj(choice?.delta)?.content)
        if (typeof choice?.finish_reason === "string") finished = true
      }
      if (!finished) return "no chunk with finish_reason"
      return sameText(text, c) ? undefined : `wrong text: ${JSON.stringify(text.slice(0, 80))}`
    }
    case "responses": {
      const all = frames(events)
      if (all === undefined) return "an event is not JSON"
      const lastEvent = all[all.length - 1]
      if (lastEvent.type !== "response.completed" || obj(lastEvent.response)?.status !== "completed") return "stream does not end with response.completed"
      const text = all.map((e) => (e.type === "response.output_text.delta" ? str(e.delta) : "")).join("")
      return sameText(text, c) ? undefined : `wrong text: ${JSON.stringify(text.slice(0, 80))}`
    }
    case "messages": {
      const all = frames(events)
      if (all === undefined) return "an event is not JSON"
      if (all[all.length - 1].type !== "message_stop") return "stream does not end with message_stop"
      const text = all.map((e) => (e.type === "content_block_delta" && obj(e.delta)?.type === "text_delta" ? str(obj(e.delta)?.text) : "")).join("")
      return sameText(text, c) ? undefined : `wrong text: ${JSON.stringify(text.slice(0, 80))}`
    }
    case "gemini": {
      const all = frames(events)
      if (all === undefined) return "a chunk is not JSON"
      const lastCandidate = obj(arr(all[all.length - 1].candidates)[0])
      if (typeof lastCandidate?.finishReason !== "string") return "the last chunk has no finishReason"
      const text = all
        .flatMap((ch) => arr(obj(obj(arr(ch.candidates)[0])?.content)?.parts))
        .map((p) => str(obj(p)?.text))
        .join("")
      return sameText(text, c) ? undefined : `wrong text: ${JSON.stringify(text.slice(0, 80))}`
    }
  }
}
