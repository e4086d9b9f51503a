/**
 * Client faults end to end (issue 9), over real loopback sockets against an in-process gateway and
 * real upstream servers:
 * - a client that disconnects mid-stream cancels the upstream request within 100 ms, on every
 *   client protocol (chat completions, Responses, Messages, Gemini) and every upstream wire;
 * - a client that stops reading a long stream makes the gateway stop pulling from the upstream
 *   (backpressure): the upstream's writes stall with a bounded number of bytes sent, and resume
 *   when the client reads again;
 * - slowloris bodies (a byte at a time, slower than `limits.bodyReadTimeoutMs`) get 408
 *   `body_read_timeout` in the route's own envelope and the connection is closed, on every family;
 * - a flood of concurrent large bodies beyond `limits.maxBodyBytesInFlight` is refused 503
 *   `server_busy` with Retry-After in each family's envelope, the bodies that fit are served, and
 *   the gateway serves normally afterwards with its in-flight byte count back at 0.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import * as net from "node:net"
import type { AddressInfo, Socket } from "node:net"
import { performance } from "node:perf_hooks"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"

type Json = Record<string, unknown>

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const until = async (what: string | (() => string), check: () => boolean, ms: number): Promise<void> => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for: ${typeof what === "string" ? what : what()}`)
    await sleep(2)
  }
}

// ---------------------------------------------------------------------------------------------
// An upstream that never ends its stream, in the wire of the path it is called on
// ---------------------------------------------------------------------------------------------

type Wire = "openai" | "anthropic" | "gemini"

interface UpstreamCall {
  readonly wire: Wire
  readonly flood: boolean
  /** performance.now() when the request's response closed (the gateway went away) */
  closedAt?: number
  /** bytes handed to the socket so far */
  bytes: number
  /** `tick ` frames sent */
  ticks: number
  /** performance.now() since which the last write waits for "drain"; undefined when not blocked */
  blockedSince?: number
}

interface EndlessUpstream {
  readonly origin: string
  readonly calls: Array<UpstreamCall>
  readonly openSockets: () => number
  readonly close: () => Promise<void>
}

const TEXT = "tick "
const QUICK_TICKS = 5
const BIG_TEXT = "x".repeat(4096)

const frame = (wire: Wire, text: string): string => {
  switch (wire) {
    case "openai":
      return `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`
    case "anthropic":
      return `event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text } })}\n\n`
    case "gemini":
      return `data: ${JSON.stringify({ candidates: [{ content: { role: "model", parts: [{ text }] }, index: 0 }], modelVersion: "m", responseId: "r1" })}\n\n`
  }
}

const opening = (wire: Wire): string => {
  switch (wire) {
    case "openai":
      return `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`
    case "anthropic":
      return (
        `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_1", type: "message", role: "assistant", model: "m", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } })}\n\n` +
        `event: content_block_start\ndata: ${JSON.stringify({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } })}\n\n`
      )
    case "gemini":
      return ""
  }
}

const wireOf = (path: string): Wire => (path.endsWith("/chat/completions") ? "openai" : path.endsWith("/messages") ? "anthropic" : "gemini")

/**
 * Streams forever: five `tick ` frames 10 ms apart then one a second, or (a model named `flood`) 4 KiB frames as fast as the
 * socket takes them, waiting for "drain" when it does not. Records when each request's response
 * closes and how many bytes it sent.
 */
const startEndlessUpstream = async (): Promise<EndlessUpstream> => {
  const calls: Array<UpstreamCall> = []
  const sockets = new Set<Socket>()
  let closed = false
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Array<Buffer> = []
    req.on("data", (d: Buffer) => parts.push(d))
    req.on("end", () => {
      const body = Buffer.concat(parts).toString("utf8")
      const path = (req.url ?? "/").split("?")[0]
      const call: UpstreamCall = { wire: wireOf(path), flood: path.includes("flood") || body.includes('"flood"'), bytes: 0, ticks: 0 }
      calls.push(call)
      res.once("close", () => (call.closedAt ??= performance.now()))
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      const gone = () => closed || res.destroyed || res.socket === null || res.socket.destroyed
      const send = (text: string): boolean => {
        call.bytes += Buffer.byteLength(text)
        return res.write(text)
      }
      send(opening(call.wire))
      if (!call.flood) {
        // five quick ticks, then one a minute: a client leaving after the quick ones must be
        // noticed by the gateway itself (on the disconnect event), not at its next write
        let timer: NodeJS.Timeout | undefined
        const tick = () => {
          if (gone()) return
          send(frame(call.wire, TEXT))
          call.ticks++
          timer = setTimeout(tick, call.ticks < QUICK_TICKS ? 10 : 60_000)
        }
        timer = setTimeout(tick, 10)
        res.once("close", () => clearTimeout(timer))
        return
      }
      const big = frame(call.wire, BIG_TEXT)
      const pump = () => {
        while (!gone()) {
          if (!send(big)) {
            call.blockedSince = performance.now()
            res.once("drain", () => {
              call.blockedSince = undefined
              pump()
            })
            return
          }
        }
      }
      pump()
    })
  })
  server.on("connection", (socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    socket.on("error", () => undefined)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    origin: `http://127.0.0.1:${port}`,
    calls,
    openSockets: () => sockets.size,
    close: async () => {
      closed = true
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A raw client connection
// ---------------------------------------------------------------------------------------------

interface RawResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

class Conn {
  buffer = Buffer.alloc(0)
  received = 0
  closed = false
  private constructor(readonly socket: Socket) {
    socket.on("data", (d: Buffer) => {
      this.received += d.length
      // keep only what a test reads (a stream's head); the rest is counted
      if (this.buffer.length < 256 * 1024) this.buffer = Buffer.concat([this.buffer, d])
    })
    socket.on("error", () => undefined)
    socket.on("close", () => (this.closed = true))
  }

  static open(port: number): Promise<Conn> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: "127.0.0.1", port }, () => {
        socket.off("error", reject)
        socket.setNoDelay(true)
        resolve(new Conn(socket))
      })
      socket.once("error", reject)
    })
  }

  send(data: string | Buffer): void {
    if (!this.socket.destroyed && this.socket.writable) this.socket.write(data)
  }

  text(): string {
    return this.buffer.toString("utf8")
  }

  /** The response at the start of the buffer once whole (Content-Length or chunked), or undefined. */
  parsed(): RawResponse | undefined {
    const end = this.buffer.indexOf("\r\n\r\n")
    if (end < 0) return undefined
    const lines = this.buffer.subarray(0, end).toString("latin1").split("\r\n")
    const headers: Record<string, string> = {}
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(":")
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    const status = Number(lines[0].split(" ")[1])
    if (headers["transfer-encoding"] === "chunked") {
      const pieces: Array<Buffer> = []
      let at = end + 4
      for (;;) {
        const lineEnd = this.buffer.indexOf("\r\n", at)
        if (lineEnd < 0) return undefined
        const size = parseInt(this.buffer.subarray(at, lineEnd).toString("latin1"), 16)
        if (size === 0) return this.buffer.length < lineEnd + 4 ? undefined : { status, headers, body: Buffer.concat(pieces).toString("utf8") }
        if (this.buffer.length < lineEnd + 2 + size + 2) return undefined
        pieces.push(this.buffer.subarray(lineEnd + 2, lineEnd + 2 + size))
        at = lineEnd + 2 + size + 2
      }
    }
    const length = Number(headers["content-length"] ?? "NaN")
    if (!Number.isFinite(length) || this.buffer.length < end + 4 + length) return undefined
    return { status, headers, body: this.buffer.subarray(end + 4, end + 4 + length).toString("utf8") }
  }

  async response(ms: number): Promise<RawResponse> {
    let r: RawResponse | undefined
    await until("a whole response", () => (r = this.parsed()) !== undefined || this.closed, ms)
    r ??= this.parsed()
    if (r === undefined) throw new Error(`connection closed without a whole response: ${this.text().slice(0, 300)}`)
    return r
  }

  destroy(): void {
    this.socket.destroy()
  }
}

const requestHead = (port: number, method: string, path: string, headers: Readonly<Record<string, string>>) =>
  `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("")}\r\n`

const conns = new Set<Conn>()
const connect = async (port: number): Promise<Conn> => {
  const c = await Conn.open(port)
  conns.add(c)
  return c
}
afterAll(() => {
  for (const c of conns) c.destroy()
})

// ---------------------------------------------------------------------------------------------
// The routes, one request body each
// ---------------------------------------------------------------------------------------------

interface Route {
  readonly name: string
  readonly family: "openai" | "messages" | "gemini" | "gateway"
  readonly path: (model: string, stream: boolean) => string
  readonly body: (model: string, stream: boolean, text: string) => Json
  readonly headers?: Readonly<Record<string, string>>
}

const chat: Route = {
  name: "chat completions",
  family: "openai",
  path: () => "/v1/chat/completions",
  body: (model, stream, text) => ({ model, messages: [{ role: "user", content: text }], stream })
}
const responses: Route = {
  name: "Responses",
  family: "openai",
  path: () => "/v1/responses",
  body: (model, stream, text) => ({ model, input: text, stream, store: false })
}
const messages: Route = {
  name: "Messages",
  family: "messages",
  path: () => "/v1/messages",
  body: (model, stream, text) => ({ model, max_tokens: 100, messages: [{ role: "user", content: text }], stream }),
  headers: { "anthropic-version": "2023-06-01" }
}
const gemini: Route = {
  name: "Gemini",
  family: "gemini",
  path: (model, stream) => `/v1beta/models/${model}:${stream ? "streamGenerateContent?alt=sse" : "generateContent"}`,
  body: (_model, _stream, text) => ({ contents: [{ role: "user", parts: [{ text }] }] })
}

/** Gemini's other stream form: `:streamGenerateContent` without `alt`, a JSON array written as it grows. */
const geminiArray: Route = { ...gemini, name: "Gemini (JSON array stream)", path: (model) => `/v1beta/models/${model}:streamGenerateContent` }

/** The body of `route` padded with spaces to exactly `size` bytes. */
const bodyOfSize = (route: Route, model: string, text: string, size: number): string => {
  const base = JSON.stringify(route.body(model, false, text))
  if (size < base.length) throw new Error(`${route.name} needs ${base.length} bytes`)
  return base.slice(0, -1) + " ".repeat(size - base.length) + "}"
}

/** The text of an echo answer in the route's shape. */
const answerText = (route: Route, json: Json): unknown => {
  if (route === chat) return ((json.choices as Array<Json>)[0].message as Json).content
  if (route === responses) return (((json.output as Array<Json>).find((i) => i.type === "message")?.content as Array<Json>)[0] as Json).text
  if (route === messages) return ((json.content as Array<Json>)[0] as Json).text
  return ((((json.candidates as Array<Json>)[0].content as Json).parts as Array<Json>)[0] as Json).text
}

/** The error envelope of the route's family: [status, code-or-type] as its clients read it. */
const expectEnvelope = (route: Pick<Route, "family">, r: RawResponse, status: number, code: string) => {
  expect(r.status, r.body).toBe(status)
  const json = JSON.parse(r.body) as Json
  expect(typeof r.headers["x-gateway-request-id"]).toBe("string")
  switch (route.family) {
    case "openai": {
      expect(r.headers["content-type"]).toMatch(/^application\/json/)
      expect(Object.keys(json)).toEqual(["error"])
      const e = json.error as Json
      expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"])
      expect(e.code).toBe(code)
      expect(e.type).toBe(status >= 500 ? "server_error" : "invalid_request_error")
      return
    }
    case "messages": {
      expect(r.headers["content-type"]).toMatch(/^application\/json/)
      expect(json.type).toBe("error")
      const e = json.error as Json
      expect(Object.keys(e).sort()).toEqual(["message", "type"])
      // 408 and 503 are api_error on this shape (spec 7.3: "all others")
      expect(e.type).toBe("api_error")
      expect(typeof e.message).toBe("string")
      return
    }
    case "gemini": {
      expect(r.headers["content-type"]).toMatch(/^application\/json/)
      expect(Object.keys(json)).toEqual(["error"])
      const e = json.error as Json
      expect(e.code).toBe(status)
      expect(e.status).toBe(status === 503 ? "UNAVAILABLE" : "INVALID_ARGUMENT")
      expect(typeof e.message).toBe("string")
      return
    }
    case "gateway": {
      expect(r.headers["content-type"]).toMatch(/^application\/problem\+json/)
      expect(json.status).toBe(status)
      expect(json.code).toBe(code)
      expect(json.requestId).toBe(r.headers["x-gateway-request-id"])
      return
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Disconnect mid-stream
// ---------------------------------------------------------------------------------------------

describe("a client that disconnects mid-stream cancels the upstream request on the disconnect, not at the next upstream write", () => {
  let up: EndlessUpstream
  let gw: TestGateway
  beforeAll(async () => {
    up = await startEndlessUpstream()
    gw = await startGateway({
      providers: {
        oa: { type: "openai", baseUrl: `${up.origin}/v1`, apiKey: "k" },
        an: { type: "anthropic", baseUrl: up.origin, apiKey: "k" },
        ge: { type: "gemini", baseUrl: up.origin, apiKey: "k" }
      },
      aliases: { "via-openai": "oa/m", "via-anthropic": "an/m", "via-gemini": "ge/m" }
    })
  })
  afterAll(async () => {
    await gw?.close()
    await up?.close()
  })

  const cases: Array<{ route: Route; model: string; wire: Wire; marker: string }> = [
    { route: chat, model: "via-openai", wire: "openai", marker: "tick" },
    { route: responses, model: "via-anthropic", wire: "anthropic", marker: "response.output_text.delta" },
    { route: messages, model: "via-anthropic", wire: "anthropic", marker: "tick" },
    { route: messages, model: "via-openai", wire: "openai", marker: "tick" },
    { route: gemini, model: "via-gemini", wire: "gemini", marker: "tick" },
    { route: chat, model: "via-gemini", wire: "gemini", marker: "tick" },
    { route: geminiArray, model: "via-anthropic", wire: "anthropic", marker: "tick" },
    { route: responses, model: "via-openai", wire: "openai", marker: "response.output_text.delta" }
  ]

  for (const { route, model, wire, marker } of cases) {
    it(`${route.name} client, ${wire} upstream: the upstream connection closes on the client's disconnect, before the upstream writes again`, async () => {
      const before = up.calls.length
      const conn = await connect(gw.port)
      const body = JSON.stringify(route.body(model, true, "hi"))
      conn.send(requestHead(gw.port, "POST", route.path(model, true), { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...route.headers }) + body)
      // output is flowing: the upstream has been asked and the client has seen streamed text
      await until("the quick ticks to reach the client", () => up.calls.length > before && up.calls[before].ticks >= QUICK_TICKS && conn.text().split(marker).length > QUICK_TICKS, 10_000)
      const call = up.calls[before]
      // the next upstream write is a minute away
      expect(call.ticks).toBe(QUICK_TICKS)
      expect(call.wire).toBe(wire)
      expect(conn.text()).toMatch(/^HTTP\/1\.1 200 /)
      expect(call.closedAt).toBeUndefined()
      conn.destroy()
      // generous backstop; the upstream's next write (which a gateway noticing the client only
      // when writing to it would need) is a minute away
      await until("the upstream request to close", () => call.closedAt !== undefined, 15_000)
      expect(call.ticks, "upstream writes before it was closed").toBe(QUICK_TICKS)
      // and the gateway still serves this route
      expect(up.calls.length).toBe(before + 1)
    })
  }
})

// ---------------------------------------------------------------------------------------------
// Backpressure
// ---------------------------------------------------------------------------------------------

describe("a client that stops reading a long stream stops the gateway pulling from the upstream", () => {
  let up: EndlessUpstream
  let gw: TestGateway
  beforeAll(async () => {
    up = await startEndlessUpstream()
    gw = await startGateway({
      providers: { oa: { type: "openai", baseUrl: `${up.origin}/v1`, apiKey: "k" }, an: { type: "anthropic", baseUrl: up.origin, apiKey: "k" } },
      requestTimeoutMs: 120_000
    })
  })
  afterAll(async () => {
    await gw?.close()
    await up?.close()
  })

  const STALL_MS = 1_000
  const MAX_BYTES = 64 * 1024 * 1024

  for (const { route, model } of [
    { route: chat, model: "oa/flood" },
    { route: messages, model: "an/flood" }
  ]) {
    it(`${route.name}: the upstream's writes stall (bounded bytes) while the client reads nothing, and resume when it reads`, async () => {
      const before = up.calls.length
      const conn = await connect(gw.port)
      const body = JSON.stringify(route.body(model, true, "hi"))
      conn.send(requestHead(gw.port, "POST", route.path(model, true), { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...route.headers }) + body)
      await until("the stream to start", () => up.calls.length > before && conn.received > 0, 10_000)
      // the client stops reading: its socket buffer fills, then the gateway's
      conn.socket.pause()
      const call = up.calls[before]
      const started = Date.now()
      await until(
        () => `the upstream to be blocked for ${STALL_MS} ms (it sent ${(call.bytes / 1048576).toFixed(1)} MiB)`,
        () => call.blockedSince !== undefined && performance.now() - call.blockedSince >= STALL_MS,
        20_000
      )
      const stalledAt = call.bytes
      // what the upstream could push before stalling is socket buffers' worth, not the stream
      expect(stalledAt, `bytes sent before the stall: ${stalledAt}`).toBeLessThan(MAX_BYTES)
      // it stays stalled: the gateway is not reading it into memory
      await sleep(300)
      expect(call.bytes).toBe(stalledAt)
      expect(call.closedAt).toBeUndefined()
      expect(Date.now() - started).toBeLessThan(25_000)
      // the client reads again: the upstream's writes go on
      conn.socket.resume()
      await until("the upstream to send 4 MiB more", () => call.bytes > stalledAt + 4 * 1024 * 1024, 15_000)
      expect(conn.text()).toMatch(/^HTTP\/1\.1 200 /)
      conn.destroy()
      await until("the upstream request to close", () => call.closedAt !== undefined, 5_000)
    })
  }
})

// ---------------------------------------------------------------------------------------------
// Slowloris
// ---------------------------------------------------------------------------------------------

describe("slowloris bodies are cut by bodyReadTimeoutMs in every family's envelope", () => {
  let gw: TestGateway
  const TIMEOUT_MS = 300
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN_KEY,
      providers: { mock: { type: "mock" } },
      aliases: { echo: "mock/echo" },
      limits: { bodyReadTimeoutMs: TIMEOUT_MS, bodyReadMaxMs: 20_000 }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const filesRoute: Route = { name: "Files upload", family: "openai", path: () => "/v1/files", body: () => ({}) }
  const geminiUpload: Route = { name: "Gemini multipart upload", family: "gemini", path: () => "/upload/v1beta/files?uploadType=multipart", body: () => ({}) }
  const ADMIN_KEY = "sk-admin-slowloris-0123456789"
  const keysRoute: Route = { name: "admin keys", family: "gateway", path: () => "/gateway/admin/keys", body: () => ({ app: "slow-app" }), headers: { authorization: `Bearer ${ADMIN_KEY}` } }
  const cases: Array<{ route: Route; contentType: string; body: string; code: string }> = [
    ...[chat, responses, messages, gemini].map((route) => ({ route, contentType: "application/json", body: JSON.stringify(route.body("echo", false, "slow")), code: "body_read_timeout" })),
    {
      route: filesRoute,
      contentType: "multipart/form-data; boundary=XyZ",
      body: `--XyZ\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--XyZ--\r\n`,
      code: "body_read_timeout"
    },
    {
      route: geminiUpload,
      contentType: "multipart/related; boundary=b",
      body: `--b\r\nContent-Type: application/json\r\n\r\n{"file":{"displayName":"slow"}}\r\n--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n`,
      code: "body_read_timeout"
    },
    { route: keysRoute, contentType: "application/json", body: JSON.stringify({ app: "slow-app" }), code: "body_read_timeout" }
  ]

  for (const { route, contentType, body, code } of cases) {
    it(`${route.name}: one byte every ${2 * TIMEOUT_MS} ms is 408 ${code} and the connection closes; the route serves afterwards`, async () => {
      const conn = await connect(gw.port)
      conn.send(requestHead(gw.port, "POST", route.path("echo", false), { "content-type": contentType, "content-length": String(Buffer.byteLength(body)), ...route.headers }))
      let at = 0
      let lastByteAt = Date.now()
      const trickle = setInterval(() => {
        if (at < body.length && !conn.closed) {
          conn.send(body[at++])
          lastByteAt = Date.now()
        }
      }, 2 * TIMEOUT_MS)
      conn.send(body[at++])
      lastByteAt = Date.now()
      try {
        const r = await conn.response(5_000)
        const sinceLastByte = Date.now() - lastByteAt
        expectEnvelope(route, r, 408, code)
        expect(r.headers["connection"]).toBe("close")
        // cut by the idle timer: the body was far from complete
        expect(at).toBeLessThan(body.length)
        expect(sinceLastByte).toBeGreaterThanOrEqual(TIMEOUT_MS - 50)
        await until("the gateway to close the connection", () => conn.closed, 3_000)
      } finally {
        clearInterval(trickle)
        conn.destroy()
      }
      // the same route answers a normal request at once
      if (route === keysRoute) return
      if (route === filesRoute || route === geminiUpload) {
        const ok = await connect(gw.port)
        ok.send(requestHead(gw.port, "POST", route.path("", false), { "content-type": contentType, "content-length": String(Buffer.byteLength(body)) }) + body)
        const r = await ok.response(5_000)
        expect(r.status, r.body).toBe(200)
        ok.destroy()
        return
      }
      const ok = await connect(gw.port)
      const whole = JSON.stringify(route.body("echo", false, "after the slowloris"))
      ok.send(requestHead(gw.port, "POST", route.path("echo", false), { "content-type": "application/json", "content-length": String(Buffer.byteLength(whole)), ...route.headers }) + whole)
      const r = await ok.response(5_000)
      expect(r.status, r.body).toBe(200)
      expect(answerText(route, JSON.parse(r.body) as Json)).toBe("after the slowloris")
      ok.destroy()
    })
  }
})

// ---------------------------------------------------------------------------------------------
// A flood of large bodies
// ---------------------------------------------------------------------------------------------

describe("a flood of large bodies is held to maxBodyBytesInFlight", () => {
  let gw: TestGateway
  const KiB = 1024
  const SIZE = 200 * KiB
  const BUDGET = 1024 * KiB
  const FIT = Math.floor(BUDGET / SIZE) // 5
  beforeAll(async () => {
    gw = await startGateway({
      providers: { mock: { type: "mock" } },
      aliases: { echo: "mock/echo" },
      limits: { maxBodyBytes: 256 * KiB, maxBodyBytesInFlight: BUDGET, bodyReadTimeoutMs: 10_000, bodyReadMaxMs: 20_000 }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const inFlightBytes = async (): Promise<number> => {
    const c = await connect(gw.port)
    c.send(requestHead(gw.port, "GET", "/gateway/status", {}))
    const r = await c.response(5_000)
    c.destroy()
    expect(r.status, r.body).toBe(200)
    return ((JSON.parse(r.body) as Json).inFlight as Json).bodyBytes as number
  }

  it(`16 concurrent ${SIZE / KiB} KiB bodies on four families: ${FIT} are read and served, the rest are 503 server_busy with Retry-After at once; then all are served`, async () => {
    const routes = [chat, responses, messages, gemini]
    const flood = Array.from({ length: 16 }, (_, i) => {
      const route = routes[i % routes.length]
      return { route, i, body: bodyOfSize(route, "echo", `flood ${i}`, SIZE) }
    })
    // every client sends its headers and the first KiB, then waits
    const open: Array<{ route: Route; i: number; body: string; conn: Conn }> = []
    for (const f of flood) {
      const conn = await connect(gw.port)
      conn.send(requestHead(gw.port, "POST", f.route.path("echo", false), { "content-type": "application/json", "content-length": String(SIZE), ...f.route.headers }) + f.body.slice(0, KiB))
      open.push({ ...f, conn })
    }
    // the bodies that do not fit are refused without waiting for them
    await until(`${16 - FIT} refusals`, () => open.filter((o) => o.conn.parsed() !== undefined).length >= 16 - FIT, 10_000)
    await sleep(200)
    const refused = open.filter((o) => o.conn.parsed() !== undefined)
    const held = open.filter((o) => o.conn.parsed() === undefined)
    expect(refused.length).toBe(16 - FIT)
    expect(held.length).toBe(FIT)
    for (const o of refused) {
      const r = o.conn.parsed()!
      expectEnvelope(o.route, r, 503, "server_busy")
      expect(Number(r.headers["retry-after"])).toBeGreaterThanOrEqual(1)
      // the unread body does not keep the connection open
      await until(`refused #${o.i}'s connection to close`, () => o.conn.closed, 5_000)
    }
    expect(await inFlightBytes()).toBe(FIT * SIZE)
    // the held ones finish their bodies and are served
    for (const o of held) o.conn.send(o.body.slice(KiB))
    for (const o of held) {
      const r = await o.conn.response(10_000)
      expect(r.status, r.body).toBe(200)
      expect(answerText(o.route, JSON.parse(r.body) as Json)).toBe(`flood ${o.i}`)
    }
    expect(await inFlightBytes()).toBe(0)
    // the refused ones retry (after Retry-After, in waves that fit) and are all served
    for (let wave = 0; wave < refused.length; wave += FIT) {
      await Promise.all(
        refused.slice(wave, wave + FIT).map(async (o) => {
          const conn = await connect(gw.port)
          conn.send(requestHead(gw.port, "POST", o.route.path("echo", false), { "content-type": "application/json", "content-length": String(SIZE), ...o.route.headers }) + o.body)
          const r = await conn.response(10_000)
          expect(r.status, r.body).toBe(200)
          expect(answerText(o.route, JSON.parse(r.body) as Json)).toBe(`flood ${o.i}`)
          conn.destroy()
        })
      )
    }
    expect(await inFlightBytes()).toBe(0)
    for (const o of open) o.conn.destroy()
  })

  it("16 concurrent chunked bodies (no Content-Length) growing past the budget: some are cut 503 server_busy mid-body, the others are served, and the budget is given back", async () => {
    const routes = [chat, responses, messages, gemini]
    const open = await Promise.all(
      Array.from({ length: 16 }, async (_, i) => {
        const route = routes[i % routes.length]
        const conn = await connect(gw.port)
        conn.send(requestHead(gw.port, "POST", route.path("echo", false), { "content-type": "application/json", "transfer-encoding": "chunked", ...route.headers }))
        return { route, i, body: bodyOfSize(route, "echo", `chunked ${i}`, SIZE), conn }
      })
    )
    // every body advances 20 KiB at a time, all together, so that all are being read at once
    const PIECE = 20 * KiB
    for (let at = 0; at < SIZE; at += PIECE) {
      for (const o of open) {
        const piece = o.body.slice(at, at + PIECE)
        o.conn.send(`${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`)
      }
      await sleep(20)
    }
    for (const o of open) o.conn.send("0\r\n\r\n")
    const answers = await Promise.all(open.map(async (o) => ({ ...o, r: await o.conn.response(10_000) })))
    const served = answers.filter((a) => a.r.status === 200)
    const refused = answers.filter((a) => a.r.status !== 200)
    expect(served.length).toBeGreaterThanOrEqual(1)
    expect(served.length).toBeLessThanOrEqual(FIT)
    expect(refused.length).toBeGreaterThanOrEqual(16 - FIT)
    for (const a of served) expect(answerText(a.route, JSON.parse(a.r.body) as Json)).toBe(`chunked ${a.i}`)
    for (const a of refused) {
      expectEnvelope(a.route, a.r, 503, "server_busy")
      expect(Number(a.r.headers["retry-after"])).toBeGreaterThanOrEqual(1)
      expect(a.r.headers["connection"]).toBe("close")
    }
    expect(await inFlightBytes()).toBe(0)
    // and a body of the largest size is read at once afterwards, on every family
    for (const route of routes) {
      const conn = await connect(gw.port)
      const body = bodyOfSize(route, "echo", "after the chunked flood", SIZE)
      conn.send(requestHead(gw.port, "POST", route.path("echo", false), { "content-type": "application/json", "content-length": String(SIZE), ...route.headers }) + body)
      const r = await conn.response(10_000)
      expect(r.status, r.body).toBe(200)
      expect(answerText(route, JSON.parse(r.body) as Json)).toBe("after the chunked flood")
      conn.destroy()
    }
    for (const o of open) o.conn.destroy()
  })
})
