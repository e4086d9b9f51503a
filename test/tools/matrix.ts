/**
 * The host tool tests' two axes, as tables: the four client protocols (how a request is written,
 * how its whole or streamed answer reads, how its refusal looks) and the three upstream kinds (how
 * a model turn is scripted, which tools a request offered, and the host exchange it carries back,
 * checked to be paired the upstream's native way). Plus one world: the three fake upstreams, the
 * real server-everything over stdio, and a gateway in this process.
 */
import * as path from "node:path"
import { expect } from "vitest"
import * as Gemini from "../support/FakeGeminiUpstream.js"
import * as Messages from "../support/FakeMessagesUpstream.js"
import * as OpenAi from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

export type Json = Record<string, unknown>

export const isRecord = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)
export const rec = (value: unknown, what = "value"): Json => {
  if (!isRecord(value)) throw new Error(`${what} is not an object: ${JSON.stringify(value)}`)
  return value
}
export const arr = (value: unknown, what = "value"): Array<unknown> => {
  if (!Array.isArray(value)) throw new Error(`${what} is not an array: ${JSON.stringify(value)}`)
  return value
}
export const recs = (value: unknown, what = "value"): Array<Json> => arr(value ?? [], what).map((v) => rec(v, what))
const str = (value: unknown): string => (typeof value === "string" ? value : "")
const num = (value: unknown): number => (typeof value === "number" ? value : Number.NaN)
const usageOf = (usage: unknown, input: string, output: string) => (isRecord(usage) ? { input: num(usage[input]), output: num(usage[output]) } : undefined)
const parseArgs = (value: unknown): unknown => (typeof value === "string" ? (value === "" ? {} : JSON.parse(value)) : value)

// ---------------------------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------------------------

export const everythingScript = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
export const KEY = "sk-host-tools-0123456789"

export interface World {
  readonly gateway: TestGateway
  readonly upstreams: Readonly<Record<UpstreamKind, Upstream>>
  /** the fakes themselves, for replies the tables do not build */
  readonly fakes: { readonly openai: OpenAi.FakeUpstream; readonly anthropic: Messages.FakeMessagesUpstream; readonly gemini: Gemini.FakeGeminiUpstream }
  readonly close: () => Promise<void>
}

/**
 * The three fake upstreams (providers `oa`, `an`, `ge`) and a gateway with server-everything over
 * stdio as tool server `everything`; `document` adds to (or overrides) the gateway config.
 */
export const startWorld = async (document: Json = {}): Promise<World> => {
  const [openai, anthropic, gemini] = await Promise.all([OpenAi.startFakeUpstream(), Messages.startFakeMessagesUpstream(), Gemini.startFakeGeminiUpstream()])
  const upstreams = { openai: openAiUpstream(openai), anthropic: messagesUpstream(anthropic), gemini: geminiUpstream(gemini) }
  const closeUpstreams = () => Promise.all([openai.close(), anthropic.close(), gemini.close()]).then(() => undefined)
  try {
    const gateway = await startGateway({
      keys: [{ key: KEY, app: "team" }],
      providers: {
        oa: { type: "openai", baseUrl: openai.url, apiKey: "upstream-secret" },
        an: { type: "anthropic", baseUrl: anthropic.origin, apiKey: "upstream-secret" },
        ge: { type: "gemini", baseUrl: gemini.origin, apiKey: "upstream-secret" }
      },
      toolServers: { everything: { command: [process.execPath, everythingScript, "stdio"] } },
      apps: { team: { hostTools: ["everything/echo", "everything/get-sum"] } },
      ...document
    })
    return {
      gateway,
      upstreams,
      fakes: { openai, anthropic, gemini },
      close: async () => {
        await gateway.close()
        await closeUpstreams()
      }
    }
  } catch (error) {
    await closeUpstreams()
    throw error
  }
}

// ---------------------------------------------------------------------------------------------
// Upstream kinds
// ---------------------------------------------------------------------------------------------

export type UpstreamKind = "openai" | "anthropic" | "gemini"
export const UPSTREAMS: ReadonlyArray<UpstreamKind> = ["openai", "anthropic", "gemini"]

/** A tool call a scripted model makes (`id` is left out on Gemini, as its older models do). */
export interface CallSpec {
  readonly id: string
  readonly name: string
  readonly args: Json
}

/** One model turn: text, then tool calls. */
export interface Turn {
  readonly text?: string
  readonly calls?: ReadonlyArray<CallSpec>
}

/** A host exchange as an upstream request carries it back, its pairing checked. */
export interface Exchanged {
  readonly name: string
  readonly args: unknown
  /** the result's content, as JSON text unless it was a plain string */
  readonly result: string
}

export interface Upstream {
  readonly kind: UpstreamKind
  /** the gateway model id that reaches this upstream */
  readonly model: string
  /** the request bodies received, in order */
  readonly bodies: () => ReadonlyArray<unknown>
  readonly reset: () => void
  /** queue model turns, answered in the form asked (JSON or stream) */
  readonly script: (...turns: ReadonlyArray<Turn>) => void
  /** answer every request by looking at it (for requests that run side by side) */
  readonly answer: (turn: (body: Json) => Turn) => void
  /** the names of the tools a request offered */
  readonly toolNames: (body: unknown) => ReadonlyArray<string>
  /**
   * Every tool call of the request's assistant turns with its result, checked to be paired the
   * upstream's way (an id, or on Gemini the name, matching a result in the next turn); a call
   * without a result fails the check.
   */
  readonly exchanges: (body: unknown) => ReadonlyArray<Exchanged>
  /** whether the request ends with tool results (the model has been given them) */
  readonly endsWithResults: (body: unknown) => boolean
  /** the tool whose call the request forces, if any */
  readonly forced: (body: unknown) => string | undefined
}

const openAiUpstream = (fake: OpenAi.FakeUpstream): Upstream => {
  const handler = (turn: Turn) =>
    OpenAi.auto({
      content: turn.text ?? null,
      split: "words",
      ...(turn.calls !== undefined && turn.calls.length > 0 ? { toolCalls: turn.calls.map((c) => ({ id: c.id, name: c.name, arguments: JSON.stringify(c.args) })) } : {})
    })
  const messages = (body: unknown) => recs(rec(body, "body").messages, "messages")
  return {
    kind: "openai",
    model: "oa/gpt-fake",
    bodies: () => fake.requests.map((r) => r.body),
    reset: () => fake.reset(),
    script: (...turns) => fake.script(...turns.map(handler)),
    answer: (turn) => fake.onRequest((req, index) => handler(turn(rec(req.body)))(req, index)),
    toolNames: (body) => recs(rec(body).tools, "tools").map((t) => str(rec(t.function).name)),
    exchanges: (body) => {
      const list = messages(body)
      const out: Array<Exchanged> = []
      list.forEach((message, i) => {
        if (message.role !== "assistant" || message.tool_calls === undefined) return
        const results = new Map<string, string>()
        for (const next of list.slice(i + 1)) {
          if (next.role !== "tool") break
          results.set(str(next.tool_call_id), typeof next.content === "string" ? next.content : JSON.stringify(next.content))
        }
        for (const call of recs(message.tool_calls, "tool_calls")) {
          const fn = rec(call.function)
          const result = results.get(str(call.id))
          expect(result, `no role:tool message answers tool_call_id ${String(call.id)}`).toBeDefined()
          out.push({ name: str(fn.name), args: parseArgs(fn.arguments), result: result ?? "" })
        }
      })
      return out
    },
    endsWithResults: (body) => messages(body).at(-1)?.role === "tool",
    forced: (body) => {
      const choice = rec(body).tool_choice
      return isRecord(choice) && isRecord(choice.function) ? str(choice.function.name) : undefined
    }
  }
}

const messagesUpstream = (fake: Messages.FakeMessagesUpstream): Upstream => {
  const handler = (turn: Turn) =>
    Messages.auto({
      blocks: [
        ...(turn.text !== undefined ? [{ type: "text" as const, text: turn.text }] : []),
        ...(turn.calls ?? []).map((c) => ({ type: "tool_use" as const, id: c.id, name: c.name, input: c.args }))
      ]
    })
  const messages = (body: unknown) => recs(rec(body, "body").messages, "messages")
  const blocks = (message: Json | undefined) => (message === undefined || typeof message.content === "string" ? [] : recs(message.content, "content"))
  return {
    kind: "anthropic",
    model: "an/claude-fake",
    bodies: () => fake.requests.map((r) => r.body),
    reset: () => fake.reset(),
    script: (...turns) => fake.script(...turns.map(handler)),
    answer: (turn) => fake.onRequest((req, index) => handler(turn(rec(req.body)))(req, index)),
    toolNames: (body) => recs(rec(body).tools, "tools").map((t) => str(t.name)),
    exchanges: (body) => {
      const list = messages(body)
      const out: Array<Exchanged> = []
      list.forEach((message, i) => {
        if (message.role !== "assistant") return
        const uses = blocks(message).filter((b) => b.type === "tool_use")
        if (uses.length === 0) return
        const next = list[i + 1]
        expect(next?.role, "a user turn follows the tool_use turn").toBe("user")
        const results = new Map(blocks(next).filter((b) => b.type === "tool_result").map((b) => [str(b.tool_use_id), b.content] as const))
        for (const use of uses) {
          expect(results.has(str(use.id)), `no tool_result answers tool_use ${String(use.id)}`).toBe(true)
          const content = results.get(str(use.id))
          const text = typeof content === "string" ? content : recs(content, "tool_result.content").map((b) => (b.type === "text" ? str(b.text) : JSON.stringify(b))).join("")
          out.push({ name: str(use.name), args: use.input, result: text })
        }
      })
      return out
    },
    endsWithResults: (body) => blocks(messages(body).at(-1)).some((b) => b.type === "tool_result"),
    forced: (body) => {
      const choice = rec(body).tool_choice
      return isRecord(choice) && choice.type === "tool" ? str(choice.name) : undefined
    }
  }
}

const geminiUpstream = (fake: Gemini.FakeGeminiUpstream): Upstream => {
  const handler = (turn: Turn) => Gemini.auto({ text: turn.text ?? "", calls: (turn.calls ?? []).map((c) => ({ name: c.name, args: c.args })) })
  const contents = (body: unknown) => recs(rec(body, "body").contents, "contents")
  const parts = (content: Json | undefined) => (content === undefined ? [] : recs(content.parts, "parts"))
  return {
    kind: "gemini",
    model: "ge/gemini-fake",
    bodies: () => fake.requests.map((r) => r.body),
    reset: () => fake.reset(),
    script: (...turns) => fake.script(...turns.map(handler)),
    answer: (turn) => fake.onRequest((req, index) => handler(turn(rec(req.body)))(req, index)),
    toolNames: (body) => recs(rec(body).tools, "tools").flatMap((t) => recs(t.functionDeclarations, "functionDeclarations").map((d) => str(d.name))),
    exchanges: (body) => {
      const list = contents(body)
      const out: Array<Exchanged> = []
      list.forEach((content, i) => {
        if (content.role !== "model") return
        const calls = parts(content).filter((p) => p.functionCall !== undefined).map((p) => rec(p.functionCall))
        if (calls.length === 0) return
        // the responses come in the next turn, in the calls' order, each naming its call
        const responses = parts(list[i + 1]).filter((p) => p.functionResponse !== undefined).map((p) => rec(p.functionResponse))
        expect(responses.map((r) => r.name), "functionResponse names match the functionCall names").toEqual(calls.map((c) => c.name))
        calls.forEach((call, j) => {
          if (call.id !== undefined) expect(responses[j].id).toBe(call.id)
          out.push({ name: str(call.name), args: call.args, result: JSON.stringify(responses[j].response) })
        })
      })
      return out
    },
    endsWithResults: (body) => parts(contents(body).at(-1)).some((p) => p.functionResponse !== undefined),
    forced: (body) => {
      const config = rec(body).toolConfig
      const calling = isRecord(config) ? config.functionCallingConfig : undefined
      if (!isRecord(calling) || calling.mode !== "ANY") return undefined
      const allowed = arr(calling.allowedFunctionNames ?? [])
      return allowed.length === 1 ? str(allowed[0]) : undefined
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Client protocols
// ---------------------------------------------------------------------------------------------

export type Protocol = "chat" | "responses" | "messages" | "gemini"
export const PROTOCOLS: ReadonlyArray<Protocol> = ["chat", "responses", "messages", "gemini"]

/** A caller's tool: name, description, JSON Schema. */
export interface CallerTool {
  readonly name: string
  readonly parameters?: Json
}

export interface Ask {
  readonly model: string
  readonly stream: boolean
  readonly prompt?: string
  readonly tools?: ReadonlyArray<CallerTool>
  /** none, or a forced call of one tool */
  readonly toolChoice?: "none" | { readonly name: string }
  /** more top-level fields of the request body */
  readonly extra?: Json
  readonly key?: string
}

/** What a client reads of an answer. */
export interface Seen {
  readonly text: string
  /** the protocol's own finish (Responses: `status` or `status/reason`) */
  readonly finish: string
  /** the tool calls shown to the client */
  readonly calls: ReadonlyArray<{ readonly name: string; readonly args: unknown }>
  /** the answer's usage: input and output tokens */
  readonly usage?: { readonly input: number; readonly output: number }
}

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly body: string
}

export interface Client {
  readonly protocol: Protocol
  readonly send: (baseUrl: string, ask: Ask) => Promise<Reply>
  /** the answer of a 200 reply, whole or streamed */
  readonly read: (reply: Reply, stream: boolean) => Seen
  /** the protocol's finish for an answer, one cut short by the loop, and one ending in tool calls */
  readonly finishes: { readonly stop: string; readonly length: string; readonly toolCalls: string }
  /** an error's message, after checking it is a 400 in the protocol's envelope (and, when given, its param where the envelope has one) */
  readonly refusal: (reply: Reply, param?: string | null) => string
}

const DEFAULT_PROMPT = "What is 2 + 3?"
const object = { type: "object", properties: {} }

const post = async (url: string, headers: Record<string, string>, body: unknown): Promise<Reply> => {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) })
  return { status: res.status, headers: res.headers, body: await res.text() }
}

/** An SSE body's frames: each one's `event`, `data` (parsed unless `[DONE]`) and comment lines. */
export interface Frame {
  readonly event?: string
  readonly data?: unknown
  readonly comments: ReadonlyArray<string>
}

export const sseFrames = (body: string): Array<Frame> =>
  body
    .split(/\r?\n\r?\n/)
    .filter((frame) => frame.trim() !== "")
    .map((frame) => {
      let event: string | undefined
      let data: string | undefined
      const comments: Array<string> = []
      for (const line of frame.split(/\r?\n/)) {
        if (line.startsWith(":")) comments.push(line.slice(1).trim())
        else if (line.startsWith("event:")) event = line.slice(6).trim()
        else if (line.startsWith("data:")) data = (data === undefined ? "" : data + "\n") + line.slice(5).trimStart()
      }
      return { ...(event !== undefined ? { event } : {}), ...(data !== undefined ? { data: data === "[DONE]" ? data : JSON.parse(data) } : {}), comments }
    })

const expectJsonError = (reply: Reply, status: number) => {
  expect(reply.status, reply.body).toBe(status)
  expect(reply.headers.get("content-type")).toMatch(/^application\/json/)
  return rec(JSON.parse(reply.body))
}

const openAiRefusal = (reply: Reply, param?: string | null) => {
  const error = rec(expectJsonError(reply, 400).error)
  expect(error.type).toBe("invalid_request_error")
  if (param !== undefined) expect(error.param).toBe(param)
  return str(error.message)
}

const chat: Client = {
  protocol: "chat",
  send: (base, ask) =>
    post(`${base}/v1/chat/completions`, { authorization: `Bearer ${ask.key ?? KEY}` }, {
      model: ask.model,
      messages: [{ role: "user", content: ask.prompt ?? DEFAULT_PROMPT }],
      ...(ask.tools !== undefined ? { tools: ask.tools.map((t) => ({ type: "function", function: { name: t.name, description: `caller tool ${t.name}`, parameters: t.parameters ?? object } })) } : {}),
      ...(ask.toolChoice === "none" ? { tool_choice: "none" } : ask.toolChoice !== undefined ? { tool_choice: { type: "function", function: { name: ask.toolChoice.name } } } : {}),
      ...(ask.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      ...ask.extra
    }),
  read: (reply, stream) => {
    if (!stream) {
      const choice = recs(rec(JSON.parse(reply.body)).choices, "choices")[0]
      const message = rec(choice.message)
      const calls = recs(message.tool_calls, "tool_calls").map((c) => rec(c.function)).map((f) => ({ name: str(f.name), args: parseArgs(f.arguments) }))
      return { text: str(message.content), finish: str(choice.finish_reason), calls, usage: usageOf(rec(JSON.parse(reply.body)).usage, "prompt_tokens", "completion_tokens") }
    }
    let text = ""
    let finish = ""
    let usage: Seen["usage"]
    const calls: Array<{ name: string; args: string }> = []
    for (const frame of sseFrames(reply.body)) {
      if (!isRecord(frame.data)) continue
      usage = usageOf(frame.data.usage, "prompt_tokens", "completion_tokens") ?? usage
      for (const choice of recs(frame.data.choices, "choices")) {
        const delta = rec(choice.delta)
        text += str(delta.content)
        for (const call of recs(delta.tool_calls, "tool_calls")) {
          const fn = rec(call.function)
          if (call.id !== undefined) calls.push({ name: str(fn.name), args: "" })
          const last = calls.at(-1)
          if (last !== undefined) last.args += str(fn.arguments)
        }
        if (typeof choice.finish_reason === "string") finish = choice.finish_reason
      }
    }
    return { text, finish, calls: calls.map((c) => ({ name: c.name, args: parseArgs(c.args) })), usage }
  },
  finishes: { stop: "stop", length: "length", toolCalls: "tool_calls" },
  refusal: openAiRefusal
}

const responseSeen = (response: Json): Seen => {
  let text = ""
  const calls: Array<{ name: string; args: unknown }> = []
  for (const item of recs(response.output, "output")) {
    if (item.type === "message") for (const part of recs(item.content, "content")) text += str(part.text)
    if (item.type === "function_call") calls.push({ name: str(item.name), args: parseArgs(item.arguments) })
  }
  const reason = isRecord(response.incomplete_details) ? `/${str(response.incomplete_details.reason)}` : ""
  return { text, finish: `${str(response.status)}${reason}`, calls, usage: usageOf(response.usage, "input_tokens", "output_tokens") }
}

const responses: Client = {
  protocol: "responses",
  send: (base, ask) =>
    post(`${base}/v1/responses`, { authorization: `Bearer ${ask.key ?? KEY}` }, {
      model: ask.model,
      input: ask.prompt ?? DEFAULT_PROMPT,
      ...(ask.tools !== undefined ? { tools: ask.tools.map((t) => ({ type: "function", name: t.name, description: `caller tool ${t.name}`, parameters: t.parameters ?? object })) } : {}),
      ...(ask.toolChoice === "none" ? { tool_choice: "none" } : ask.toolChoice !== undefined ? { tool_choice: { type: "function", name: ask.toolChoice.name } } : {}),
      ...(ask.stream ? { stream: true } : {}),
      ...ask.extra
    }),
  read: (reply, stream) => {
    if (!stream) return responseSeen(rec(JSON.parse(reply.body)))
    let text = ""
    let final: Json | undefined
    for (const frame of sseFrames(reply.body)) {
      if (!isRecord(frame.data)) continue
      if (frame.event === "response.output_text.delta") text += str(frame.data.delta)
      if (frame.event === "response.completed" || frame.event === "response.incomplete" || frame.event === "response.failed") final = rec(frame.data.response)
    }
    if (final === undefined) throw new Error(`no terminal event in ${reply.body}`)
    const seen = responseSeen(final)
    // the streamed deltas and the final response agree
    expect(text).toBe(seen.text)
    return seen
  },
  finishes: { stop: "completed", length: "incomplete/max_output_tokens", toolCalls: "completed" },
  refusal: openAiRefusal
}

const messages: Client = {
  protocol: "messages",
  send: (base, ask) =>
    post(`${base}/v1/messages`, { "x-api-key": ask.key ?? KEY, "anthropic-version": "2023-06-01" }, {
      model: ask.model,
      max_tokens: 512,
      messages: [{ role: "user", content: ask.prompt ?? DEFAULT_PROMPT }],
      ...(ask.tools !== undefined ? { tools: ask.tools.map((t) => ({ name: t.name, description: `caller tool ${t.name}`, input_schema: t.parameters ?? object })) } : {}),
      ...(ask.toolChoice === "none" ? { tool_choice: { type: "none" } } : ask.toolChoice !== undefined ? { tool_choice: { type: "tool", name: ask.toolChoice.name } } : {}),
      ...(ask.stream ? { stream: true } : {}),
      ...ask.extra
    }),
  read: (reply, stream) => {
    if (!stream) {
      const body = rec(JSON.parse(reply.body))
      const blocks = recs(body.content, "content")
      return {
        text: blocks.map((b) => (b.type === "text" ? str(b.text) : "")).join(""),
        finish: str(body.stop_reason),
        calls: blocks.filter((b) => b.type === "tool_use").map((b) => ({ name: str(b.name), args: b.input })),
        usage: usageOf(body.usage, "input_tokens", "output_tokens")
      }
    }
    let text = ""
    let finish = ""
    let usage: Seen["usage"]
    const calls: Array<{ name: string; args: string }> = []
    for (const frame of sseFrames(reply.body)) {
      if (!isRecord(frame.data)) continue
      if (frame.event === "content_block_start" && rec(frame.data.content_block).type === "tool_use") calls.push({ name: str(rec(frame.data.content_block).name), args: "" })
      if (frame.event === "content_block_delta") {
        const delta = rec(frame.data.delta)
        if (delta.type === "text_delta") text += str(delta.text)
        const last = calls.at(-1)
        if (delta.type === "input_json_delta" && last !== undefined) last.args += str(delta.partial_json)
      }
      if (frame.event === "message_delta") {
        finish = str(rec(frame.data.delta).stop_reason)
        usage = usageOf(frame.data.usage, "input_tokens", "output_tokens")
      }
    }
    return { text, finish, calls: calls.map((c) => ({ name: c.name, args: parseArgs(c.args) })), usage }
  },
  finishes: { stop: "end_turn", length: "max_tokens", toolCalls: "tool_use" },
  refusal: (reply) => {
    const body = expectJsonError(reply, 400)
    expect(body.type).toBe("error")
    const error = rec(body.error)
    expect(error.type).toBe("invalid_request_error")
    return str(error.message)
  }
}

const candidateSeen = (chunks: ReadonlyArray<Json>): Seen => {
  let text = ""
  let finish = ""
  let usage: Seen["usage"]
  const calls: Array<{ name: string; args: unknown }> = []
  for (const chunk of chunks) {
    usage = usageOf(chunk.usageMetadata, "promptTokenCount", "candidatesTokenCount") ?? usage
    for (const candidate of recs(chunk.candidates, "candidates")) {
      const content = isRecord(candidate.content) ? candidate.content : {}
      for (const part of recs(content.parts, "parts")) {
        if (part.thought !== true) text += str(part.text)
        if (isRecord(part.functionCall)) calls.push({ name: str(part.functionCall.name), args: part.functionCall.args })
      }
      if (typeof candidate.finishReason === "string") finish = candidate.finishReason
    }
  }
  return { text, finish, calls, usage }
}

const gemini: Client = {
  protocol: "gemini",
  send: (base, ask) =>
    post(`${base}/v1beta/models/${ask.model}:${ask.stream ? "streamGenerateContent?alt=sse" : "generateContent"}`, { "x-goog-api-key": ask.key ?? KEY }, {
      contents: [{ role: "user", parts: [{ text: ask.prompt ?? DEFAULT_PROMPT }] }],
      ...(ask.tools !== undefined ? { tools: [{ functionDeclarations: ask.tools.map((t) => ({ name: t.name, description: `caller tool ${t.name}`, parameters: t.parameters ?? object })) }] } : {}),
      ...(ask.toolChoice === "none"
        ? { toolConfig: { functionCallingConfig: { mode: "NONE" } } }
        : ask.toolChoice !== undefined
          ? { toolConfig: { functionCallingConfig: { mode: "ANY", allowedFunctionNames: [ask.toolChoice.name] } } }
          : {}),
      ...ask.extra
    }),
  read: (reply, stream) =>
    candidateSeen(stream ? sseFrames(reply.body).flatMap((f) => (isRecord(f.data) ? [f.data] : [])) : [rec(JSON.parse(reply.body))]),
  finishes: { stop: "STOP", length: "MAX_TOKENS", toolCalls: "STOP" },
  refusal: (reply) => {
    const error = rec(expectJsonError(reply, 400).error)
    expect(error.code).toBe(400)
    expect(error.status).toBe("INVALID_ARGUMENT")
    return str(error.message)
  }
}

export const CLIENTS: Readonly<Record<Protocol, Client>> = { chat, responses, messages, gemini }
