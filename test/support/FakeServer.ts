import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"

/**
 * What the fake upstreams share. `makeFakeServer`: the plumbing, a keep-alive server on 127.0.0.1
 * with its sockets tracked, sleeps and writes that give up once the client or the server is gone,
 * and a `close` that ends every pending timer and socket and never hangs. `startScriptedServer`:
 * the reply engine on top of it (the script queue, request recording, the reply kinds), so that
 * each fake keeps only its wire format.
 */

/** The whole request body as text (bytes past `maxBytes` are counted but dropped). */
export const readBody = (req: IncomingMessage, maxBytes = Number.POSITIVE_INFINITY): Promise<string> =>
  new Promise((resolve) => {
    const parts: Buffer[] = []
    let size = 0
    let settled = false
    const finish = () => {
      if (settled) return
      settled = true
      resolve(Buffer.concat(parts).toString("utf8"))
    }
    req.on("data", (d: Buffer) => {
      size += d.length
      if (size <= maxBytes) parts.push(d)
    })
    req.on("end", finish)
    req.on("error", finish)
    req.on("close", finish)
  })

/** The request body as a JSON object: `{}` when it is not JSON (the caller answers that as it sees fit). */
export const readJsonBody = async (req: IncomingMessage): Promise<Record<string, unknown>> => {
  try {
    const parsed: unknown = JSON.parse(await readBody(req))
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

export interface FakeServerKit {
  /** resolves after ms, or early when the response closes or the server shuts down */
  readonly sleep: (ms: number, res: ServerResponse) => Promise<void>
  readonly gone: (res: ServerResponse) => boolean
  /** write and wait for the write to flush; a no-op once the client or the server is gone */
  readonly write: (res: ServerResponse, data: string) => Promise<void>
  readonly destroy: (req: IncomingMessage, res: ServerResponse) => void
  readonly openConnections: () => number
  /** listen with this request handler; resolves with the port */
  readonly listen: (handle: (req: IncomingMessage, res: ServerResponse) => void) => Promise<number>
  readonly close: () => Promise<void>
}

export const makeFakeServer = (): FakeServerKit => {
  const sockets = new Set<Socket>()
  /** cancel functions for every pending timer; close() fires them all */
  const timers = new Set<() => void>()
  let closed = false
  let closing: Promise<void> | undefined
  const server = createServer({ keepAlive: true })
  server.keepAliveTimeout = 5_000

  const sleep = (ms: number, res: ServerResponse): Promise<void> =>
    new Promise((resolve) => {
      if (closed || res.destroyed) return resolve()
      const done = () => {
        clearTimeout(timer)
        timers.delete(done)
        res.off("close", done)
        resolve()
      }
      const timer = setTimeout(done, Math.max(0, ms))
      timers.add(done)
      res.once("close", done)
    })

  const gone = (res: ServerResponse): boolean => closed || res.destroyed || res.socket === null || res.socket.destroyed

  const write = (res: ServerResponse, data: string): Promise<void> =>
    new Promise((resolve) => {
      if (gone(res)) return resolve()
      try {
        res.write(data, () => resolve())
      } catch {
        resolve()
      }
    })

  const destroy = (req: IncomingMessage, res: ServerResponse) => {
    ;(res.socket ?? req.socket)?.destroy()
    res.destroy()
  }

  server.on("connection", (socket: Socket) => {
    if (closed) return void socket.destroy()
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    socket.on("error", () => {})
  })
  server.on("clientError", (_err, socket) => {
    try {
      if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
    } catch {
      // ignore
    }
    socket.destroy()
  })
  server.on("error", () => {})

  const listen = (handle: (req: IncomingMessage, res: ServerResponse) => void) =>
    new Promise<number>((resolve, reject) => {
      server.on("request", handle)
      server.once("error", reject)
      server.listen(0, "127.0.0.1", () => {
        server.off("error", reject)
        resolve((server.address() as AddressInfo).port)
      })
    })

  const close = (): Promise<void> => {
    if (closing) return closing
    closed = true
    closing = new Promise<void>((resolve) => {
      for (const cancel of [...timers]) cancel()
      timers.clear()
      // resolve once the listener is closed and every socket has emitted "close" (so that
      // openConnections() is 0 afterwards), bounded by a safety net so close() never hangs
      const socketsClosed = [...sockets].map((s) => new Promise<void>((r) => (s.destroyed && !sockets.has(s) ? r() : s.once("close", () => r()))))
      const serverClosed = new Promise<void>((r) => server.close(() => r()))
      server.closeAllConnections()
      for (const s of sockets) s.destroy()
      const safety = setTimeout(() => {
        sockets.clear()
        resolve()
      }, 1_000)
      safety.unref()
      void Promise.all([serverClosed, ...socketsClosed]).then(() => {
        clearTimeout(safety)
        resolve()
      })
    })
    return closing
  }

  return { sleep, gone, write, destroy, openConnections: () => sockets.size, listen, close }
}

// ---------------------------------------------------------------------------------------------
// The scripted reply engine
// ---------------------------------------------------------------------------------------------

/** What every fake records of a request; a fake may record more (`remotePort`, `query`). */
export interface RecordedRequestBase {
  method: string
  /** Path without the query string. */
  path: string
  /** The raw request target including any query string. */
  url: string
  headers: Record<string, string | string[] | undefined>
  /** Parsed JSON when the body parses; otherwise the raw string; undefined when empty. */
  body: unknown
  rawBody: string
}

/** The replies every fake understands besides its SSE ones (`sse`, `resetAfter`). */
export type FixedReply =
  | { kind: "json"; status?: number; body: unknown; headers?: Record<string, string> }
  | { kind: "text"; status?: number; body: string; headers?: Record<string, string> }
  /** Destroy the socket before writing any byte of the response. */
  | { kind: "reset" }
  /** Accept, never answer for `ms`, then destroy the socket. */
  | { kind: "stall"; ms: number }

/** What the engine reads of the SSE replies; each fake adds its items (`chunks`, `events`). */
export type StreamReply =
  | { kind: "sse"; delayMs?: number; status?: number; headers?: Record<string, string> }
  | { kind: "resetAfter"; delayMs?: number }

export type ScriptedHandler<Rec, R> = (req: Rec, index: number) => R | Promise<R>

/** What `script` accepts: a fixed reply, or a handler used for exactly one request. */
export type ScriptedReply<Rec, R> = R | ScriptedHandler<Rec, R>

export interface ScriptedUpstream<Rec, R> {
  /** "http://127.0.0.1:PORT" */
  origin: string
  /** `origin` + the API's base path */
  url: string
  port: number
  /** Every request received, in order. */
  requests: Rec[]
  /** Currently open sockets. */
  openConnections(): number
  /** Queue replies for the next requests, in order; when the queue is empty the handler answers. */
  script(...replies: Array<ScriptedReply<Rec, R>>): void
  /** Number of scripted replies not yet consumed. */
  pending(): number
  /** Replace the default handler. */
  onRequest(handler: ScriptedHandler<Rec, R>): void
  /** Forget recorded requests, the script queue and any custom handler. */
  reset(): void
  /** Closes the server, cancels timers and destroys all sockets. Idempotent. */
  close(): Promise<void>
}

type SseReplyOf<R> = Extract<R, { kind: "sse" | "resetAfter" }>

export interface ScriptedServerOptions<Rec extends RecordedRequestBase, R extends FixedReply | StreamReply, Item> {
  /** appended to the origin for `url`, e.g. "/v1" */
  readonly basePath: string
  /** answers when nothing is scripted (until `onRequest` replaces it; `reset` restores it) */
  readonly defaultHandler: ScriptedHandler<Rec, R>
  /** the reply when a handler throws */
  readonly handlerFailed: (error: unknown) => R
  /** the items an `sse` or `resetAfter` reply streams, in order */
  readonly sseItems: (reply: SseReplyOf<R>) => ReadonlyArray<Item>
  /** one item as written on the wire */
  readonly encodeSseItem: (item: Item) => string
  /** written raw after an `sse` reply's items (same delay before it), e.g. `data: [DONE]` */
  readonly sseTrailer?: (reply: Extract<R, { kind: "sse" }>) => string | undefined
  readonly sseContentType: string
  readonly jsonContentType: string
  /** set on every response, before the reply's own headers */
  readonly commonHeaders?: Readonly<Record<string, string>>
  /** whether to parse a body of this content-type as JSON (default: any body) */
  readonly jsonBody?: (contentType: string | undefined) => boolean
  /** bytes of a body past this are dropped (default: none) */
  readonly maxBodyBytes?: number
  /** what this fake records beyond RecordedRequestBase; `search` is the query string without "?" */
  readonly recordExtras?: (req: IncomingMessage, search: string) => Omit<Rec, keyof RecordedRequestBase>
  /**
   * The JSON body of the 500 sent when something other than a handler fails (the message says
   * what). Without it such a request is left alone (an unknown reply kind) or its socket destroyed.
   */
  readonly failureBody?: (message: string) => unknown
}

/** A fake upstream listening on a random port, answering scripted replies, then its handler. */
export const startScriptedServer = <Rec extends RecordedRequestBase, R extends FixedReply | StreamReply, Item>(
  options: ScriptedServerOptions<Rec, R, Item>
): Promise<ScriptedUpstream<Rec, R>> => {
  const kit = makeFakeServer()
  const { sleep, gone, write, destroy } = kit
  const requests: Rec[] = []
  let queue: Array<ScriptedReply<Rec, R>> = []
  let handler: ScriptedHandler<Rec, R> = options.defaultHandler

  const setHeaders = (res: ServerResponse, headers: Record<string, string> | undefined) => {
    for (const [k, v] of Object.entries(options.commonHeaders ?? {})) res.setHeader(k, v)
    for (const [k, v] of Object.entries(headers ?? {})) res.setHeader(k, v)
  }

  const writeSseHead = (res: ServerResponse, status: number, headers: Record<string, string> | undefined) => {
    res.statusCode = status
    res.setHeader("content-type", options.sseContentType)
    res.setHeader("cache-control", "no-cache")
    setHeaders(res, headers)
    res.flushHeaders()
  }

  const sendItems = async (res: ServerResponse, items: ReadonlyArray<Item>, delayMs: number | undefined) => {
    for (const item of items) {
      if (delayMs !== undefined && delayMs > 0) await sleep(delayMs, res)
      if (gone(res)) return
      await write(res, options.encodeSseItem(item))
    }
  }

  const sendFixed = (res: ServerResponse, status: number, body: string, contentType: string, headers: Record<string, string> | undefined) => {
    res.statusCode = status
    res.setHeader("content-type", contentType)
    res.setHeader("content-length", Buffer.byteLength(body))
    setHeaders(res, headers)
    res.end(body)
  }

  const sendFailure = (res: ServerResponse, failureBody: (message: string) => unknown, message: string) =>
    sendFixed(res, 500, JSON.stringify(failureBody(message)), options.jsonContentType, undefined)

  const respond = async (req: IncomingMessage, res: ServerResponse, reply: R): Promise<void> => {
    if (gone(res)) return
    const r: FixedReply | StreamReply = reply
    switch (r.kind) {
      case "json":
        sendFixed(res, r.status ?? 200, JSON.stringify(r.body) ?? "null", options.jsonContentType, r.headers)
        return
      case "text":
        sendFixed(res, r.status ?? 200, r.body, "text/plain; charset=utf-8", r.headers)
        return
      case "sse": {
        writeSseHead(res, r.status ?? 200, r.headers)
        await sendItems(res, options.sseItems(reply as SseReplyOf<R>), r.delayMs)
        const trailer = options.sseTrailer?.(reply as Extract<R, { kind: "sse" }>)
        if (trailer !== undefined) {
          if (r.delayMs !== undefined && r.delayMs > 0) await sleep(r.delayMs, res)
          if (gone(res)) return
          await write(res, trailer)
        }
        if (!gone(res)) res.end()
        return
      }
      case "reset":
        destroy(req, res)
        return
      case "resetAfter":
        writeSseHead(res, 200, undefined)
        await sendItems(res, options.sseItems(reply as SseReplyOf<R>), r.delayMs)
        // Give the kernel a moment to hand the bytes to the peer before the RST/FIN.
        await sleep(10, res)
        destroy(req, res)
        return
      case "stall":
        await sleep(r.ms, res)
        destroy(req, res)
        return
      default: {
        const never: never = r
        if (options.failureBody !== undefined) sendFailure(res, options.failureBody, `bad reply ${String(never)}`)
      }
    }
  }

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const raw = await readBody(req, options.maxBodyBytes)
    const ct = req.headers["content-type"]
    let body: unknown = raw.length === 0 ? undefined : raw
    if (raw.length > 0 && (options.jsonBody?.(typeof ct === "string" ? ct : undefined) ?? true)) {
      try {
        body = JSON.parse(raw)
      } catch {
        body = raw
      }
    }
    const url = req.url ?? "/"
    const q = url.indexOf("?")
    const recorded = {
      method: req.method ?? "GET",
      path: q === -1 ? url : url.slice(0, q),
      url,
      headers: { ...req.headers },
      body,
      rawBody: raw,
      ...options.recordExtras?.(req, q === -1 ? "" : url.slice(q + 1))
    } as Rec
    const index = requests.push(recorded) - 1
    let reply: R
    try {
      const next = queue.shift()
      if (next === undefined) reply = await handler(recorded, index)
      else if (typeof next === "function") reply = await (next as ScriptedHandler<Rec, R>)(recorded, index)
      else reply = next
    } catch (e) {
      reply = options.handlerFailed(e)
    }
    await respond(req, res, reply)
  }

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch(() => {
      const failureBody = options.failureBody
      if (failureBody === undefined) return destroy(req, res)
      try {
        if (!res.headersSent && !gone(res)) sendFailure(res, failureBody, "fake upstream failure")
        else destroy(req, res)
      } catch {
        destroy(req, res)
      }
    })
  }

  return kit.listen(onRequest).then((port): ScriptedUpstream<Rec, R> => {
    const origin = `http://127.0.0.1:${port}`
    return {
      origin,
      url: `${origin}${options.basePath}`,
      port,
      requests,
      openConnections: kit.openConnections,
      script: (...replies) => void queue.push(...replies),
      pending: () => queue.length,
      onRequest: (h) => {
        handler = h
      },
      reset: () => {
        requests.length = 0
        queue = []
        handler = options.defaultHandler
      },
      close: kit.close
    }
  })
}
