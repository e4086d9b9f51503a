/**
 * A fault-injecting upstream for reliability tests: a real HTTP server on 127.0.0.1 (random port)
 * speaking one provider wire (`openai` chat completions, `anthropic` Messages, `gemini`
 * generateContent), where the fault is chosen by the model the request names (the model part of
 * `<provider>/<fault>`), so that any number of cases can run at once against one server and one
 * gateway without a shared script queue.
 *
 * It counts what a leak would show: `openConnections()` (sockets open now) and `inFlight()`
 * (exchanges whose response has neither ended nor been closed: a fault that holds the response
 * open after its last byte stays in flight until the gateway aborts the exchange).
 *
 * Faults (the model name), each written in the server's own wire:
 * - `ok`: a whole answer, "Hello from upstream" (JSON or SSE);
 * - `reset`: the socket is destroyed before any byte of the response;
 * - `stall`: the request is read, nothing is ever answered (held until the peer goes away);
 * - `status-<code>`: that HTTP status with the wire's error body (`Retry-After: 7` on a 429);
 * - `overload-200`: a 200 whose body (JSON) or first SSE frame is the wire's overload error (the
 *   stream is then held open);
 * - `bad-json`: a 200 whose body is not JSON (stream: a `data:` frame that is not JSON, then held);
 * - `bad-sse`: a 200 event stream of lines that are not SSE frames, then the end (stream only;
 *   as JSON the same garbage);
 * - `truncated-tool`: an answer that stops in the middle of a tool call (stream: the call's start
 *   and half its arguments, then a clean end; JSON: arguments that are not JSON (openai) or the
 *   body cut short inside the call with a matching content-length);
 * - `mid-reset`: output first (stream: a text frame; JSON: the head and half the body), then the
 *   socket destroyed;
 * - `mid-stall`: output first, then nothing more, held open;
 * - `mid-bad-json`: a text frame, then a frame that is not JSON, then held open (JSON: as bad-json);
 * - `mid-overload`: a text frame, then the wire's in-band overload error, then held open (JSON: as
 *   overload-200).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { chatCompletionObject, chunks } from "./FakeUpstream.js"
import { events as messageEvents, messageObject, messageSseEvents } from "./FakeMessagesUpstream.js"
import { errorBody, generateChunks, generateObject } from "./FakeGeminiUpstream.js"
import { readJsonBody } from "./FakeServer.js"

export type Wire = "openai" | "anthropic" | "gemini"

export const faults = [
  "ok",
  "reset",
  "stall",
  "status-400",
  "status-429",
  "status-500",
  "status-503",
  "status-529",
  "overload-200",
  "bad-json",
  "bad-sse",
  "truncated-tool",
  "deep-tool",
  "mid-reset",
  "mid-stall",
  "mid-bad-json",
  "mid-overload"
] as const
export type Fault = (typeof faults)[number]

export const OUTPUT_TEXT = "Hello from upstream"
/** in every error message the server sends: the gateway must never pass provider text on */
export const UPSTREAM_DETAIL = "upstream-detail-7f3a"
/** the text sent before a `mid-*` fault */
export const PARTIAL_TEXT = "Partial"

/** One exchange the server saw. */
export interface Exchange {
  readonly wire: Wire
  /** the model part the request named (the fault), "" when none could be read */
  readonly model: string
  readonly stream: boolean
  readonly path: string
  /** performance.now() when the response ended or closed */
  closedAt?: number
}

export interface FaultyUpstream {
  readonly wire: Wire
  /** "http://127.0.0.1:PORT" */
  readonly origin: string
  /** the base URL a provider of this wire is configured with */
  readonly baseUrl: string
  readonly exchanges: Array<Exchange>
  readonly openConnections: () => number
  /** exchanges whose response is neither ended nor closed */
  readonly inFlight: () => number
  readonly close: () => Promise<void>
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// The wire formats
// ---------------------------------------------------------------------------------------------

interface WireFormat {
  readonly sseContentType: string
  /** the answer as JSON */
  readonly json: (model: string) => unknown
  /** the frames of a whole streamed answer */
  readonly sse: (model: string) => Array<string>
  /** the opening frames and one text frame: output a client can see */
  readonly partial: (model: string) => Array<string>
  /** the error body for an HTTP status */
  readonly errorBody: (status: number) => unknown
  /** a 200 JSON body reporting overload */
  readonly overloadBody: () => unknown
  /** an in-band overload error frame of a stream */
  readonly overloadFrame: () => string
  /** a streamed answer that stops inside a tool call (a clean end follows) */
  readonly truncatedToolSse: (model: string) => Array<string>
  /** a JSON answer (text) that stops inside a tool call */
  readonly truncatedToolJson: (model: string) => string
  /** a streamed answer whose tool call's arguments nest 10,000 levels deep (valid JSON otherwise) */
  readonly deepToolSse: (model: string) => Array<string>
  /** a JSON answer (text) whose tool call's arguments nest 10,000 levels deep */
  readonly deepToolJson: (model: string) => string
}

/** JSON text nesting 10,000 arrays deep: valid, but past what any JSON.stringify can print again. */
export const DEEP_JSON = "[".repeat(10_000) + "]".repeat(10_000)
/** `text` (JSON of an answer built with the string "__DEEP__" in it) with that string replaced by `deep`. */
const withDeep = (text: string, deep: string = DEEP_JSON): string => {
  if (!text.includes('"__DEEP__"')) throw new Error(`no "__DEEP__" in ${text}`)
  return text.replace('"__DEEP__"', deep)
}

const say = (message: string) => `${message} (${UPSTREAM_DETAIL})`
const data = (value: unknown) => `data: ${JSON.stringify(value)}\n\n`
const event = (e: { event: string; data: unknown } | string) => (typeof e === "string" ? e : `event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`)

/** The text of a JSON answer cut just inside its first tool call's arguments. */
const cutInside = (text: string, marker: string): string => {
  const at = text.indexOf(marker)
  if (at < 0) throw new Error(`no ${marker} in ${text}`)
  return text.slice(0, at + marker.length)
}

const openaiWire: WireFormat = {
  sseContentType: "text/event-stream; charset=utf-8",
  json: (model) => chatCompletionObject({ model, content: OUTPUT_TEXT }),
  sse: (model) => {
    const meta = { id: "chatcmpl-faulty", model }
    return [chunks.role(meta), chunks.text("Hello ", meta), chunks.text("from upstream", meta), chunks.finish("stop", meta), chunks.usage({ prompt: 10, completion: 3 }, meta)]
      .map(data)
      .concat("data: [DONE]\n\n")
  },
  partial: (model) => [chunks.role({ model }), chunks.text(PARTIAL_TEXT, { model })].map(data),
  errorBody: (status) => ({
    error: {
      message: say(status === 429 ? "Rate limit reached for requests" : status === 529 ? "The engine is currently overloaded" : status === 503 ? "Service unavailable" : `upstream failure ${status}`),
      type: status === 429 ? "requests" : status === 400 ? "invalid_request_error" : "server_error",
      param: null,
      code: null
    }
  }),
  overloadBody: () => ({ error: { message: say("The server is overloaded, please try again later"), type: "server_error", param: null, code: null } }),
  overloadFrame: () => data({ error: { message: say("The server is overloaded, please try again later"), type: "server_error", param: null, code: null } }),
  truncatedToolSse: (model) =>
    [chunks.role({ model }), chunks.toolCallStart(0, "call_1", "get_weather", "", { model }), chunks.toolCallArgs(0, '{"city": "Par', { model })].map(data),
  truncatedToolJson: (model) =>
    JSON.stringify(chatCompletionObject({ model, content: null, toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city": "Par' }] })),
  deepToolSse: (model) =>
    [chunks.role({ model }), chunks.toolCallStart(0, "call_1", "get_weather", "", { model }), chunks.toolCallArgs(0, `{"city": ${DEEP_JSON}}`, { model }), chunks.finish("tool_calls", { model })]
      .map(data)
      .concat("data: [DONE]\n\n"),
  deepToolJson: (model) => JSON.stringify(chatCompletionObject({ model, content: null, toolCalls: [{ id: "call_1", name: "get_weather", arguments: `{"city": ${DEEP_JSON}}` }] }))
}

const anthropicWire: WireFormat = {
  sseContentType: "text/event-stream; charset=utf-8",
  json: (model) => messageObject({ model, blocks: [{ type: "text", text: OUTPUT_TEXT }] }),
  sse: (model) => messageSseEvents({ model, blocks: [{ type: "text", text: OUTPUT_TEXT }] }).map(event),
  partial: (model) =>
    [messageEvents.messageStart({ model }), messageEvents.blockStart(0, { type: "text", text: "" }), messageEvents.ping(), messageEvents.textDelta(0, PARTIAL_TEXT)].map(event),
  errorBody: (status) => {
    const [type, message] =
      status === 400
        ? ["invalid_request_error", "messages: field required"]
        : status === 429
          ? ["rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"]
          : status === 529
            ? ["overloaded_error", "Overloaded"]
            : ["api_error", status === 503 ? "Service unavailable" : "Internal server error"]
    return { type: "error", error: { type, message: say(message) } }
  },
  overloadBody: () => ({ type: "error", error: { type: "overloaded_error", message: say("Overloaded") } }),
  overloadFrame: () => event(messageEvents.error("overloaded_error", say("Overloaded"))),
  truncatedToolSse: (model) =>
    [
      messageEvents.messageStart({ model }),
      messageEvents.blockStart(0, { type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }),
      messageEvents.inputJsonDelta(0, ""),
      messageEvents.inputJsonDelta(0, '{"city": "Par')
    ].map(event),
  truncatedToolJson: (model) =>
    cutInside(JSON.stringify(messageObject({ model, blocks: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] })), '"city":"Par'),
  deepToolSse: (model) =>
    [
      messageEvents.messageStart({ model }),
      messageEvents.blockStart(0, { type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }),
      messageEvents.inputJsonDelta(0, `{"city": ${DEEP_JSON}}`),
      messageEvents.blockStop(0),
      messageEvents.messageDelta("tool_use", 5),
      messageEvents.messageStop()
    ].map(event),
  deepToolJson: (model) => withDeep(JSON.stringify(messageObject({ model, blocks: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "__DEEP__" } }] })))
}

const geminiWire: WireFormat = {
  sseContentType: "text/event-stream",
  json: (model) => generateObject({ modelVersion: model, text: OUTPUT_TEXT }),
  sse: (model) => generateChunks({ modelVersion: model, text: ["Hello ", "from upstream"] }).map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`),
  partial: (model) => generateChunks({ modelVersion: model, text: [PARTIAL_TEXT, "never sent"] }).slice(0, 1).map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`),
  errorBody: (status) =>
    status === 400
      ? errorBody(400, "INVALID_ARGUMENT", say("Invalid JSON payload received."))
      : status === 429
        ? errorBody(429, "RESOURCE_EXHAUSTED", say("Resource has been exhausted (e.g. check quota)."))
        : status === 503
          ? errorBody(503, "UNAVAILABLE", say("The service is currently unavailable."))
          : status === 529
            ? errorBody(529, "UNAVAILABLE", say("The model is overloaded. Please try again later."))
            : errorBody(status, "INTERNAL", say("Internal error encountered.")),
  overloadBody: () => errorBody(503, "UNAVAILABLE", say("The model is overloaded. Please try again later.")),
  overloadFrame: () => `data: ${JSON.stringify(errorBody(503, "UNAVAILABLE", say("The model is overloaded. Please try again later.")))}\r\n\r\n`,
  truncatedToolSse: (model) => {
    const whole = `data: ${JSON.stringify(generateChunks({ modelVersion: model, text: "", calls: [{ name: "get_weather", args: { city: "Paris" } }] })[0])}\r\n\r\n`
    // the call's chunk cut inside its arguments: no frame end follows, the stream just ends
    return [cutInside(whole, '"city":"Par')]
  },
  truncatedToolJson: (model) => cutInside(JSON.stringify(generateObject({ modelVersion: model, text: "", calls: [{ name: "get_weather", args: { city: "Paris" } }] })), '"city":"Par'),
  deepToolSse: (model) =>
    generateChunks({ modelVersion: model, text: "", calls: [{ name: "get_weather", args: { city: "__DEEP__" } }] }).map((c) => `data: ${JSON.stringify(c).replace('"__DEEP__"', DEEP_JSON)}\r\n\r\n`),
  deepToolJson: (model) => withDeep(JSON.stringify(generateObject({ modelVersion: model, text: "", calls: [{ name: "get_weather", args: { city: "__DEEP__" } }] })))
}

const wires: Record<Wire, WireFormat> = { openai: openaiWire, anthropic: anthropicWire, gemini: geminiWire }

const geminiPath = /^\/v1beta\/models\/(.+):(generateContent|streamGenerateContent)$/

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

export const startFaultyUpstream = async (wire: Wire, options: { readonly keepAliveTimeoutMs?: number } = {}): Promise<FaultyUpstream> => {
  const format = wires[wire]
  const sockets = new Set<Socket>()
  const open = new Set<ServerResponse>()
  const exchanges: Array<Exchange> = []
  let closed = false
  // as a real server does, a connection that carries no request is closed after a while (1 s
  // here): a client pool may open one it then has no request for (undici reconnects a pool client
  // whose queue held requests that were aborted); a request in flight is never cut by this
  const server = createServer({ keepAlive: true, connectionsCheckingInterval: 200, headersTimeout: 1_000, requestTimeout: 0 })
  server.keepAliveTimeout = options.keepAliveTimeoutMs ?? 5_000

  server.on("connection", (socket: Socket) => {
    if (closed) return void socket.destroy()
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    socket.on("error", () => {})
  })
  server.on("clientError", (_err, socket) => socket.destroy())
  server.on("error", () => {})

  const gone = (res: ServerResponse) => closed || res.destroyed || res.socket === null || res.socket.destroyed

  const write = (res: ServerResponse, text: string): Promise<void> =>
    new Promise((resolve) => {
      if (gone(res)) return resolve()
      try {
        res.write(text, () => resolve())
      } catch {
        resolve()
      }
    })

  /** resolves when the response closes (the peer went away) or the server shuts down */
  const held = (res: ServerResponse): Promise<void> =>
    new Promise((resolve) => {
      if (gone(res)) return resolve()
      const check = setInterval(() => {
        if (gone(res)) {
          clearInterval(check)
          resolve()
        }
      }, 50)
      res.once("close", () => {
        clearInterval(check)
        resolve()
      })
    })

  const destroy = (req: IncomingMessage, res: ServerResponse) => {
    ;(res.socket ?? req.socket)?.destroy()
    res.destroy()
  }

  const sseHead = (res: ServerResponse) => {
    res.writeHead(200, { "content-type": format.sseContentType, "cache-control": "no-cache" })
    res.flushHeaders()
  }

  const sendJson = (res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...headers })
    res.end(body)
  }

  const frames = async (res: ServerResponse, list: ReadonlyArray<string>) => {
    for (const f of list) await write(res, f)
  }

  const answer = async (req: IncomingMessage, res: ServerResponse, fault: string, model: string, stream: boolean): Promise<void> => {
    const status = /^status-(\d{3})$/.exec(fault)
    if (status !== null) {
      const code = Number(status[1])
      return sendJson(res, code, JSON.stringify(format.errorBody(code)), code === 429 ? { "retry-after": "7" } : {})
    }
    switch (fault) {
      case "ok":
        if (!stream) return sendJson(res, 200, JSON.stringify(format.json(model)))
        sseHead(res)
        await frames(res, format.sse(model))
        if (!gone(res)) res.end()
        return
      case "reset":
        return destroy(req, res)
      case "stall":
        return held(res)
      case "overload-200":
      case "mid-overload":
        if (!stream) return sendJson(res, 200, JSON.stringify(format.overloadBody()))
        sseHead(res)
        if (fault === "mid-overload") {
          await frames(res, format.partial(model))
          await sleep(20)
        }
        await write(res, format.overloadFrame())
        return held(res)
      case "bad-json":
      case "mid-bad-json":
        if (!stream) return sendJson(res, 200, '{"id": "broken", "choices": [{"message": ')
        sseHead(res)
        if (fault === "mid-bad-json") {
          await frames(res, format.partial(model))
          await sleep(20)
        }
        await write(res, wire === "gemini" ? 'data: {"candidates": [{"content": oops\r\n\r\n' : 'data: {"choices": [oops\n\n')
        return held(res)
      case "bad-sse":
        if (!stream) return sendJson(res, 200, "<html><body>502 Bad Gateway</body></html>")
        sseHead(res)
        await write(res, "<html>\n<body>\nthis is not an event stream\n</body>\n</html>\n\n")
        if (!gone(res)) res.end()
        return
      case "deep-tool":
        if (!stream) return sendJson(res, 200, format.deepToolJson(model))
        sseHead(res)
        await frames(res, format.deepToolSse(model))
        if (!gone(res)) res.end()
        return
      case "truncated-tool":
        if (!stream) return sendJson(res, 200, format.truncatedToolJson(model))
        sseHead(res)
        await frames(res, format.truncatedToolSse(model))
        if (!gone(res)) res.end()
        return
      case "mid-reset":
      case "mid-stall": {
        if (!stream) {
          const body = JSON.stringify(format.json(model))
          res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) })
          await write(res, body.slice(0, Math.floor(body.length / 2)))
        } else {
          sseHead(res)
          await frames(res, format.partial(model))
        }
        if (fault === "mid-stall") return held(res)
        // give the peer the bytes before the reset
        await sleep(20)
        return destroy(req, res)
      }
      default:
        return sendJson(res, 404, JSON.stringify(format.errorBody(404)))
    }
  }

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    // not JSON: no model, answered 404
    const body = await readJsonBody(req)
    const url = new URL(req.url ?? "/", "http://x")
    let model = typeof body.model === "string" ? body.model : ""
    let stream = body.stream === true
    if (wire === "gemini") {
      const match = geminiPath.exec(url.pathname)
      model = match !== null ? decodeURIComponent(match[1]) : ""
      stream = match?.[2] === "streamGenerateContent"
    }
    // `<fault>~<anything>` is that fault under a name of its own (a target with health of its own)
    const tilde = model.indexOf("~")
    if (tilde >= 0) model = model.slice(0, tilde)
    const exchange: Exchange = { wire, model, stream, path: url.pathname }
    exchanges.push(exchange)
    open.add(res)
    res.once("close", () => {
      open.delete(res)
      exchange.closedAt = performance.now()
    })
    await answer(req, res, model, model, stream)
  }

  const port = await new Promise<number>((resolve, reject) => {
    server.on("request", (req: IncomingMessage, res: ServerResponse) => {
      handle(req, res).catch(() => destroy(req, res))
    })
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject)
      resolve((server.address() as AddressInfo).port)
    })
  })
  const origin = `http://127.0.0.1:${port}`

  let closing: Promise<void> | undefined
  const close = (): Promise<void> => {
    if (closing !== undefined) return closing
    closed = true
    closing = new Promise<void>((resolve) => {
      const socketsClosed = [...sockets].map((s) => new Promise<void>((r) => (s.destroyed ? r() : s.once("close", () => r()))))
      const serverClosed = new Promise<void>((r) => server.close(() => r()))
      server.closeAllConnections()
      for (const s of sockets) s.destroy()
      const safety = setTimeout(resolve, 1_000)
      safety.unref()
      void Promise.all([serverClosed, ...socketsClosed]).then(() => {
        clearTimeout(safety)
        resolve()
      })
    })
    return closing
  }

  return {
    wire,
    origin,
    baseUrl: wire === "openai" ? `${origin}/v1` : origin,
    exchanges,
    openConnections: () => sockets.size,
    inFlight: () => open.size,
    close
  }
}

/** A loopback port nothing listens on (bound, then closed): a connection to it is refused. */
export const refusedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer()
    s.once("error", reject)
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as AddressInfo).port
      s.close(() => resolve(port))
    })
  })
