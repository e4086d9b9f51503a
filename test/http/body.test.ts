import * as net from "node:net"
import { setTimeout as sleep } from "node:timers/promises"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { rawCall, type RawCallOptions, type RawReply } from "../support/RawHttp.js"

/**
 * Request bodies at the edge over real sockets: media type, JSON, size caps (declared and chunked,
 * global and per app), read timeouts against trickling clients, and the in-flight byte budget.
 */

type Json = Record<string, unknown>

type Reply = RawReply

/** One request on a fresh connection. */
const call = (gw: TestGateway, method: string, path: string, options: RawCallOptions = {}): Promise<Reply> => rawCall(gw.port, method, path, options)

const parse = (r: Reply): Json => JSON.parse(r.text) as Json
const errorOf = (r: Reply): Json => parse(r).error as Json

const jsonType = { "content-type": "application/json" }

/** A chat request for the mock echo model, padded with spaces to exactly `size` bytes. */
const chatBodyOfSize = (size: number, content = "padded"): string => {
  const base = JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content }] })
  if (size < base.length) throw new Error(`a chat body needs at least ${base.length} bytes`)
  return base.slice(0, -1) + " ".repeat(size - base.length) + "}"
}

const chatBody = (content: string) => JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content }] })

const chat = (gw: TestGateway, body: string | Buffer, headers: Readonly<Record<string, string>> = jsonType, chunked = false) =>
  call(gw, "POST", "/v1/chat/completions", { headers, body, chunked })

const contentOf = (r: Reply): unknown => ((parse(r).choices as Array<Json>)[0].message as Json).content

/** A good model request still succeeds: the gateway keeps serving after a refusal. */
const expectServing = async (gw: TestGateway, headers: Readonly<Record<string, string>> = {}) => {
  const r = await chat(gw, chatBody("still serving"), { ...jsonType, ...headers })
  expect(r.status).toBe(200)
  expect(contentOf(r)).toBe("still serving")
}

const expectOpenAi = (r: Reply, status: number, type: string, code: string) => {
  expect(r.status).toBe(status)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  expect(Object.keys(parse(r))).toEqual(["error"])
  const e = errorOf(r)
  expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"])
  expect(e.type).toBe(type)
  expect(e.code).toBe(code)
  expect(typeof r.headers["x-gateway-request-id"]).toBe("string")
}

// ---------------------------------------------------------------------------------------------
// A raw connection, for requests whose body arrives partly, slowly or never.

interface RawResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/** Parse one complete HTTP/1.1 response at the start of `buffer`, or undefined when incomplete. */
const parseResponse = (buffer: Buffer, closed: boolean): { readonly response: RawResponse; readonly used: number } | undefined => {
  const end = buffer.indexOf("\r\n\r\n")
  if (end < 0) return undefined
  const lines = buffer.subarray(0, end).toString("latin1").split("\r\n")
  const status = Number(lines[0].split(" ")[1])
  const headers: Record<string, string> = {}
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":")
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  const start = end + 4
  if (headers["content-length"] !== undefined) {
    const length = Number(headers["content-length"])
    if (buffer.length < start + length) return undefined
    return { response: { status, headers, body: buffer.subarray(start, start + length).toString("utf8") }, used: start + length }
  }
  if (headers["transfer-encoding"] === "chunked") {
    const pieces: Array<Buffer> = []
    let at = start
    for (;;) {
      const lineEnd = buffer.indexOf("\r\n", at)
      if (lineEnd < 0) return undefined
      const size = parseInt(buffer.subarray(at, lineEnd).toString("latin1"), 16)
      if (size === 0) {
        if (buffer.length < lineEnd + 4) return undefined
        return { response: { status, headers, body: Buffer.concat(pieces).toString("utf8") }, used: lineEnd + 4 }
      }
      if (buffer.length < lineEnd + 2 + size + 2) return undefined
      pieces.push(buffer.subarray(lineEnd + 2, lineEnd + 2 + size))
      at = lineEnd + 2 + size + 2
    }
  }
  if (!closed) return undefined
  return { response: { status, headers, body: buffer.subarray(start).toString("utf8") }, used: buffer.length }
}

class RawConnection {
  private buffer = Buffer.alloc(0)
  private listeners: Array<() => void> = []
  private isClosed = false

  private constructor(readonly socket: net.Socket) {
    socket.on("data", (data: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, data])
      this.wake()
    })
    // the server may close while we are still sending: EPIPE / ECONNRESET are expected
    socket.on("error", () => undefined)
    socket.on("close", () => {
      this.isClosed = true
      this.wake()
    })
  }

  static open(port: number): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: "127.0.0.1", port }, () => {
        socket.off("error", reject)
        resolve(new RawConnection(socket))
      })
      socket.once("error", reject)
    })
  }

  get closed(): boolean {
    return this.isClosed
  }

  private wake() {
    const listeners = this.listeners
    this.listeners = []
    for (const l of listeners) l()
  }

  private changed(timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs)
      this.listeners.push(() => {
        clearTimeout(timer)
        resolve(true)
      })
    })
  }

  /** Write if the socket still takes writes. */
  send(data: string | Buffer): void {
    if (!this.socket.destroyed && this.socket.writable) this.socket.write(data)
  }

  /** The next whole response; fails when none arrives within the time or the connection closes first. */
  async response(timeoutMs = 5_000): Promise<RawResponse> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const parsed = parseResponse(this.buffer, this.isClosed)
      if (parsed !== undefined) {
        this.buffer = this.buffer.subarray(parsed.used)
        return parsed.response
      }
      if (this.isClosed) throw new Error(`connection closed without a whole response (${this.buffer.length} bytes)`)
      const left = deadline - Date.now()
      if (left <= 0) throw new Error("no response in time")
      await this.changed(left)
    }
  }

  /** Whether the server closed the connection within the time. */
  async waitClosed(timeoutMs = 3_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs
    while (!this.isClosed) {
      const left = deadline - Date.now()
      if (left <= 0) return false
      await this.changed(left)
    }
    return true
  }

  destroy(): void {
    this.socket.destroy()
  }
}

const head = (port: number, headers: Readonly<Record<string, string>>, path = "/v1/chat/completions") =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("")}\r\n`

const rawJson = (r: RawResponse): Json => JSON.parse(r.body) as Json

const expectRawOpenAi = (r: RawResponse, status: number, code: string) => {
  expect(r.status).toBe(status)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  const e = rawJson(r).error as Json
  expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"])
  expect(e.code).toBe(code)
  expect(typeof r.headers["x-gateway-request-id"]).toBe("string")
  return e
}

/** Run with a raw connection and always close it. */
const withRaw = async <A>(port: number, f: (conn: RawConnection) => Promise<A>): Promise<A> => {
  const conn = await RawConnection.open(port)
  try {
    return await f(conn)
  } finally {
    conn.destroy()
  }
}

const mock = { providers: { mock: { type: "mock" } } }

// ---------------------------------------------------------------------------------------------

describe("body: media type and JSON", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, limits: { maxBodyBytes: 4096 } })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("no content-type is 415 unsupported_media_type", async () => {
    const r = await chat(gw, chatBody("hi"), {})
    expectOpenAi(r, 415, "invalid_request_error", "unsupported_media_type")
    await expectServing(gw)
  })

  it("text/plain is 415 unsupported_media_type", async () => {
    const r = await chat(gw, chatBody("hi"), { "content-type": "text/plain" })
    expectOpenAi(r, 415, "invalid_request_error", "unsupported_media_type")
    const form = await chat(gw, "a=b", { "content-type": "application/x-www-form-urlencoded" })
    expectOpenAi(form, 415, "invalid_request_error", "unsupported_media_type")
    const lookalike = await chat(gw, chatBody("hi"), { "content-type": "application/jsonx" })
    expectOpenAi(lookalike, 415, "invalid_request_error", "unsupported_media_type")
    await expectServing(gw)
  })

  it("application/json with parameters and in any case is accepted", async () => {
    const r = await chat(gw, chatBody("params ok"), { "content-type": "application/json; charset=utf-8" })
    expect(r.status).toBe(200)
    expect(contentOf(r)).toBe("params ok")
    const upper = await chat(gw, chatBody("case ok"), { "content-type": "Application/JSON" })
    expect(upper.status).toBe(200)
  })

  it("invalid JSON is 400", async () => {
    const r = await chat(gw, '{"model": "mock/echo", "messages": [')
    expectOpenAi(r, 400, "invalid_request_error", "invalid_json")
    await expectServing(gw)
  })

  it("a JSON array body is 400", async () => {
    const r = await chat(gw, JSON.stringify([{ model: "mock/echo" }]))
    expect(r.status).toBe(400)
    expect(errorOf(r).type).toBe("invalid_request_error")
    const scalar = await chat(gw, '"just a string"')
    expect(scalar.status).toBe(400)
    const nul = await chat(gw, "null")
    expect(nul.status).toBe(400)
    await expectServing(gw)
  })

  it("an empty body is 400", async () => {
    const r = await chat(gw, "")
    expect(r.status).toBe(400)
    expect(errorOf(r).type).toBe("invalid_request_error")
    const chunkedEmpty = await chat(gw, "", jsonType, true)
    expect(chunkedEmpty.status).toBe(400)
    await expectServing(gw)
  })

  it("a chunked JSON body under the cap is read", async () => {
    const r = await chat(gw, chatBody("chunked ok"), jsonType, true)
    expect(r.status).toBe(200)
    expect(contentOf(r)).toBe("chunked ok")
  })

  it("a connection stays usable after a 400 whose body was read", async () => {
    await withRaw(gw.port, async (conn) => {
      const bad = "{not json"
      conn.send(head(gw.port, { ...jsonType, "content-length": String(bad.length) }) + bad)
      expectRawOpenAi(await conn.response(), 400, "invalid_json")
      const good = chatBody("same socket")
      conn.send(head(gw.port, { ...jsonType, "content-length": String(good.length) }) + good)
      const r = await conn.response()
      expect(r.status).toBe(200)
      expect(((rawJson(r).choices as Array<Json>)[0].message as Json).content).toBe("same socket")
    })
  })
})

describe("body: size caps", () => {
  const keyA = "sk-app-a-0123456789"
  const keyB = "sk-app-b-0123456789"
  const authA = { ...jsonType, authorization: `Bearer ${keyA}` }
  const authB = { ...jsonType, authorization: `Bearer ${keyB}` }
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      ...mock,
      keys: [
        { key: keyA, app: "a" },
        { key: keyB, app: "b" }
      ],
      limits: { maxBodyBytes: 4096, apps: { a: { maxBodyBytes: 1024 } } }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("a body of exactly maxBodyBytes is read", async () => {
    const r = await chat(gw, chatBodyOfSize(4096, "at the cap"), authB)
    expect(r.status).toBe(200)
    expect(contentOf(r)).toBe("at the cap")
  })

  it("a declared Content-Length over maxBodyBytes is 413 at once, with connection: close, without reading the body", async () => {
    await withRaw(gw.port, async (conn) => {
      const started = Date.now()
      // headers only: the body never comes, so an answer proves it was not waited for
      conn.send(head(gw.port, { ...authB, "content-length": "4097" }))
      const r = await conn.response(10_000)
      // a generous backstop, far below the 30 s body read timeout a waiting gateway would need
      expect(Date.now() - started).toBeLessThan(10_000)
      const e = expectRawOpenAi(r, 413, "request_body_too_large")
      expect(e.type).toBe("invalid_request_error")
      expect(r.headers["connection"]).toBe("close")
      expect(await conn.waitClosed()).toBe(true)
    })
    await expectServing(gw, authB)
  })

  it("a huge declared Content-Length is 413 too", async () => {
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...authB, "content-length": String(10 * 1024 * 1024 * 1024) }))
      const r = await conn.response(3_000)
      expectRawOpenAi(r, 413, "request_body_too_large")
      expect(await conn.waitClosed()).toBe(true)
    })
    await expectServing(gw, authB)
  })

  it("a 413 reaches a client that is still sending its body", async () => {
    const r = await chat(gw, chatBodyOfSize(4097), authB)
    expectOpenAi(r, 413, "invalid_request_error", "request_body_too_large")
    expect(r.headers["connection"]).toBe("close")
    await expectServing(gw, authB)
  })

  it("a chunked body over maxBodyBytes is 413 and the connection closes", async () => {
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...authB, "transfer-encoding": "chunked" }))
      const piece = Buffer.alloc(3000, 0x20)
      conn.send(`${piece.length.toString(16)}\r\n`)
      conn.send(piece)
      conn.send("\r\n")
      conn.send(`${piece.length.toString(16)}\r\n`)
      conn.send(piece)
      conn.send("\r\n")
      // the terminating chunk is never sent: the cap must fire on what arrived
      const r = await conn.response(3_000)
      expectRawOpenAi(r, 413, "request_body_too_large")
      expect(r.headers["connection"]).toBe("close")
      expect(await conn.waitClosed()).toBe(true)
    })
    await expectServing(gw, authB)
  })

  it("a chunked body over the cap sent whole by a client is 413", async () => {
    const r = await chat(gw, chatBodyOfSize(6000), authB, true)
    expectOpenAi(r, 413, "invalid_request_error", "request_body_too_large")
    await expectServing(gw, authB)
  })

  it("the per-app cap limits.apps.<app>.maxBodyBytes applies to that app's key only", async () => {
    const body = chatBodyOfSize(2000, "two thousand")
    const a = await chat(gw, body, authA)
    expectOpenAi(a, 413, "invalid_request_error", "request_body_too_large")
    expect(errorOf(a).message).toContain("1024")
    const b = await chat(gw, body, authB)
    expect(b.status).toBe(200)
    expect(contentOf(b)).toBe("two thousand")
    const aChunked = await chat(gw, body, authA, true)
    expectOpenAi(aChunked, 413, "invalid_request_error", "request_body_too_large")
    const aSmall = await chat(gw, chatBodyOfSize(1024, "small"), authA)
    expect(aSmall.status).toBe(200)
    expect(contentOf(aSmall)).toBe("small")
    await expectServing(gw, authA)
  })

  it("the body cap is checked after auth: an unauthenticated oversized request is 401", async () => {
    const r = await chat(gw, chatBodyOfSize(5000), jsonType)
    expectOpenAi(r, 401, "authentication_error", "invalid_api_key")
    await expectServing(gw, authB)
  })
})

describe("body: read timeouts", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, limits: { bodyReadTimeoutMs: 300, bodyReadMaxMs: 1000 } })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("a body that stops arriving is refused after bodyReadTimeoutMs (body_read_timeout) and the connection closes", async () => {
    const body = chatBodyOfSize(400)
    await withRaw(gw.port, async (conn) => {
      const started = Date.now()
      conn.send(head(gw.port, { ...jsonType, "content-length": String(body.length) }) + body.slice(0, 200))
      const r = await conn.response(5_000)
      const took = Date.now() - started
      expect(r.status).toBe(408)
      const e = expectRawOpenAi(r, 408, "body_read_timeout")
      expect(e.type).toBe("invalid_request_error")
      // the idle timer cut it (a timer never fires early), not bodyReadMaxMs
      expect(took).toBeGreaterThanOrEqual(250)
      expect(e.message).toBe("Request body stopped arriving for 300 ms")
      expect(r.headers["connection"]).toBe("close")
      expect(await conn.waitClosed()).toBe(true)
    })
    await expectServing(gw)
  })

  it("a body with no byte at all after the headers times out the same way", async () => {
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...jsonType, "content-length": "100" }))
      const r = await conn.response(5_000)
      expectRawOpenAi(r, 408, "body_read_timeout")
      expect(await conn.waitClosed()).toBe(true)
    })
    await expectServing(gw)
  })

  it("a client trickling one byte every 100 ms is cut off by bodyReadMaxMs", async () => {
    const body = chatBodyOfSize(400)
    // an idle timeout ten times the trickle's interval: a busy machine does not trip it
    const trickled = await startGateway({ ...mock, limits: { bodyReadTimeoutMs: 1_000, bodyReadMaxMs: 1_500 } })
    try {
      await withRaw(trickled.port, async (conn) => {
        const started = Date.now()
        conn.send(head(trickled.port, { ...jsonType, "content-length": String(body.length) }))
        let at = 0
        const timer = setInterval(() => {
          if (at < body.length) conn.send(body[at++])
        }, 100)
        try {
          const r = await conn.response(10_000)
          const took = Date.now() - started
          const e = expectRawOpenAi(r, 408, "body_read_timeout")
          // cut by the total timer (never early), not the idle one: bytes kept coming
          expect(took).toBeGreaterThanOrEqual(1_400)
          expect(e.message).toBe("Request body was not complete within 1500 ms")
          expect(at).toBeGreaterThanOrEqual(5)
          expect(r.headers["connection"]).toBe("close")
        } finally {
          clearInterval(timer)
        }
        expect(await conn.waitClosed()).toBe(true)
      })
      await expectServing(trickled)
    } finally {
      await trickled.close()
    }
  })

  it("a chunked body that stops arriving times out as well", async () => {
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...jsonType, "transfer-encoding": "chunked" }) + "5\r\n{\"mod\r\n")
      const r = await conn.response(5_000)
      expectRawOpenAi(r, 408, "body_read_timeout")
      expect(await conn.waitClosed()).toBe(true)
    })
    await expectServing(gw)
  })

  const earlyRefusals = [
    { name: "404 not_found", status: 404, method: "POST", path: "/v1/nope", headers: {} },
    { name: "405 method_not_allowed", status: 405, method: "DELETE", path: "/healthz", headers: {} },
    { name: "403 cross_origin_forbidden", status: 403, method: "POST", path: "/v1/chat/completions", headers: { origin: "http://evil.example" } },
    { name: "400 invalid_host", status: 400, method: "POST", path: "/v1/chat/completions", headers: { host: "evil.example" } }
  ] as const satisfies ReadonlyArray<{ name: string; status: number; method: string; path: string; headers: Readonly<Record<string, string>> }>

  for (const refusal of earlyRefusals) {
    it(`a ${refusal.name} answered before the body is read does not keep the connection waiting for that body`, async () => {
      await withRaw(gw.port, async (conn) => {
        const headers: Record<string, string> = { host: `127.0.0.1:${gw.port}`, "content-type": "application/json", "content-length": "1000", ...refusal.headers }
        const lines = [`${refusal.method} ${refusal.path} HTTP/1.1`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)]
        conn.send(lines.join("\r\n") + "\r\n\r\n")
        const r = await conn.response(3_000)
        expect(r.status).toBe(refusal.status)
        // the 1000 announced bytes never come; the gateway must not hold the socket for them
        // without end (bodyReadTimeoutMs is 300 here)
        expect(await conn.waitClosed(2_000)).toBe(true)
      })
      await expectServing(gw)
    })
  }

  it("a client that hangs up mid-body does not disturb the gateway", async () => {
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...jsonType, "content-length": "400" }) + "{")
      await sleep(50)
    })
    await expectServing(gw)
  })
})

describe("body: in-flight byte budget", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, limits: { maxBodyBytes: 2000, maxBodyBytesInFlight: 3000, bodyReadTimeoutMs: 2000, bodyReadMaxMs: 5000 } })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("a body that does not fit the budget is refused server_busy with Retry-After; the budget frees when the first body is read", async () => {
    const first = chatBodyOfSize(2000, "first")
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...jsonType, "content-length": "2000" }) + first.slice(0, 1000))
      // let the gateway take the first reservation
      await sleep(150)
      await withRaw(gw.port, async (second) => {
        // headers only: the refusal must not wait for a body
        second.send(head(gw.port, { ...jsonType, "content-length": "2000" }))
        const busy = await second.response(3_000)
        const e = expectRawOpenAi(busy, 503, "server_busy")
        expect(e.type).toBe("server_error")
        expect(Number(busy.headers["retry-after"])).toBeGreaterThanOrEqual(1)
      })
      const busyAgain = await chat(gw, chatBodyOfSize(2000, "second"))
      expectOpenAi(busyAgain, 503, "server_error", "server_busy")
      expect(busyAgain.headers["retry-after"]).toBeDefined()
      // a small body still fits beside the held one
      const small = await chat(gw, chatBodyOfSize(900, "small"))
      expect(small.status).toBe(200)
      conn.send(first.slice(1000))
      const r = await conn.response(3_000)
      expect(r.status).toBe(200)
      expect(((rawJson(r).choices as Array<Json>)[0].message as Json).content).toBe("first")
    })
    const after = await chat(gw, chatBodyOfSize(2000, "after"))
    expect(after.status).toBe(200)
    expect(contentOf(after)).toBe("after")
    await expectServing(gw)
  })

  it("the budget is given back when a client hangs up mid-body", async () => {
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...jsonType, "content-length": "2000" }) + "{")
      await sleep(100)
    })
    await sleep(100)
    const r = await chat(gw, chatBodyOfSize(2000, "after hangup"))
    expect(r.status).toBe(200)
    const again = await chat(gw, chatBodyOfSize(2000, "and again"))
    expect(again.status).toBe(200)
  })

  it("server_busy does not keep the connection waiting for the unread body", async () => {
    const first = chatBodyOfSize(2000, "first")
    await withRaw(gw.port, async (conn) => {
      conn.send(head(gw.port, { ...jsonType, "content-length": "2000" }) + first.slice(0, 1000))
      await sleep(150)
      await withRaw(gw.port, async (second) => {
        second.send(head(gw.port, { ...jsonType, "content-length": "2000" }))
        const busy = await second.response(3_000)
        expectRawOpenAi(busy, 503, "server_busy")
        // like a 413, the refusal leaves the body unread: the connection is closed, not kept
        // waiting for 2000 bytes that nobody will read (bodyReadTimeoutMs is 2000 here)
        expect(await second.waitClosed(3_000)).toBe(true)
      })
      conn.send(first.slice(1000))
      expect((await conn.response(3_000)).status).toBe(200)
    })
    await expectServing(gw)
  })

  it("the budget is given back after a 413", async () => {
    const big = await chat(gw, chatBodyOfSize(2001))
    expectOpenAi(big, 413, "invalid_request_error", "request_body_too_large")
    const r = await chat(gw, chatBodyOfSize(2000, "after 413"))
    expect(r.status).toBe(200)
    const s = await chat(gw, chatBodyOfSize(2000, "twice"))
    expect(s.status).toBe(200)
  })
})
