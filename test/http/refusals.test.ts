import Anthropic, { toFile as anthropicFile } from "@anthropic-ai/sdk"
import { GoogleGenAI } from "@google/genai"
import * as net from "node:net"
import OpenAI, { toFile } from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { lingerBounds } from "../../src/http/Linger.js"
import { childGateways } from "../support/ChildGateway.js"
import { until } from "../files/uploadWire.js"

/**
 * Refusals made before the body is read (bad key 401, wrong media type 415, no route 404, a
 * declared length over maxBodyBytes 413, server_busy 503, and the chunked kinds of these) reach
 * clients that are still sending a large body: Node's fetch and the official SDKs, on every route
 * family, many times over (a lost answer was intermittent). And a client that never stops sending
 * is cut off within the drain bounds. The gateway runs as its own process: a client in the
 * gateway's process shares its event loop and never saw the lost answers.
 */

type Json = Record<string, unknown>
type Family = "openai" | "messages" | "gemini" | "gateway"

const MiB = 1024 * 1024
const KEY = "sk-refusals-0123456789"
const ADMIN = "admin-refusals-0123456789"
const BAD = "sk-refusals-wrong-000000"
const MAX_BODY = 5 * MiB
const IN_FLIGHT = 8 * MiB
/** over maxBodyBytes: 413 */
const BIG = 6 * MiB
/** under maxBodyBytes; with HELD in flight, over maxBodyBytesInFlight: 503 server_busy */
const MEDIUM = 4.5 * MiB
const HELD = 4 * MiB
const REPEAT = 10
/** chunked bodies lost the answer more often (7 to 10 times in 10 before the drain): fewer repeats */
const CHUNKED_REPEAT = 5

const gateways = childGateways()
let base = ""
let port = 0

beforeAll(async () => {
  const { cwd, configFile } = gateways.workspace("gw-refusals-", [
    "providers: { mock: { type: mock } }",
    `adminKey: ${ADMIN}`,
    `keys: [{ key: ${KEY}, app: big }]`,
    `limits: { maxBodyBytes: ${MAX_BODY}, maxBodyBytesInFlight: ${IN_FLIGHT}, bodyReadTimeoutMs: 120000, bodyReadMaxMs: 300000 }`
  ])
  port = (await gateways.start(cwd, configFile)).port
  base = `http://127.0.0.1:${port}`
}, 40_000)
afterAll(() => gateways.cleanup())

/** A body of exactly `size` bytes: spaces between `open` and `close` (by default a JSON object). */
const bodyOf = (size: number, open = "{", close = "}"): Buffer => {
  const body = Buffer.alloc(size, 0x20)
  body.write(open, 0, "latin1")
  body.write(close, size - close.length, "latin1")
  return body
}

/** A body sent piece by piece without a Content-Length (Transfer-Encoding: chunked). */
const chunked = (bytes: Buffer): ReadableStream<Uint8Array> => {
  let at = 0
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (at >= bytes.length) return controller.close()
      controller.enqueue(bytes.subarray(at, at + 64 * 1024))
      at += 64 * 1024
    }
  })
}

interface Route {
  readonly name: string
  readonly family: Family
  readonly path: string
  /** the path of no route in the same family */
  readonly missing: string
  readonly contentType: string
  /** the text around the padding of a well-formed body (a PDF upload the route reads up to its cap) */
  readonly frame?: readonly [string, string]
  /** a content type the route refuses with 415 */
  readonly wrongType: string
  readonly auth: (key: string) => Record<string, string>
  /** whether the body is reserved against maxBodyBytesInFlight (503 server_busy) */
  readonly budgeted: boolean
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` })
const routes: ReadonlyArray<Route> = [
  { name: "chat", family: "openai", path: "/v1/chat/completions", missing: "/v1/chat/completionz", contentType: "application/json", wrongType: "text/plain", auth: bearer, budgeted: true },
  { name: "Responses", family: "openai", path: "/v1/responses", missing: "/v1/responsez", contentType: "application/json", wrongType: "text/plain", auth: bearer, budgeted: true },
  {
    name: "Messages",
    family: "messages",
    path: "/v1/messages",
    missing: "/v1/messages/nowhere",
    contentType: "application/json",
    wrongType: "text/plain",
    auth: (key) => ({ "x-api-key": key, "anthropic-version": "2023-06-01" }),
    budgeted: true
  },
  {
    name: "Gemini",
    family: "gemini",
    path: "/v1beta/models/x:generateContent",
    missing: "/v1beta/nowhere",
    contentType: "application/json",
    wrongType: "text/plain",
    auth: (key) => ({ "x-goog-api-key": key }),
    budgeted: true
  },
  {
    name: "Files",
    family: "openai",
    path: "/v1/files",
    missing: "/v1/filez",
    contentType: "multipart/form-data; boundary=b0",
    frame: ['--b0\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--b0\r\ncontent-disposition: form-data; name="file"; filename="a.pdf"\r\ncontent-type: application/pdf\r\n\r\n%PDF-1.4\n', "\r\n--b0--\r\n"],
    wrongType: "application/json",
    auth: bearer,
    budgeted: false
  },
  {
    name: "Gemini upload",
    family: "gemini",
    path: "/upload/v1beta/files?uploadType=multipart",
    missing: "/upload/v1beta/nowhere",
    contentType: "multipart/related; boundary=b0",
    frame: ['--b0\r\ncontent-type: application/json\r\n\r\n{"file":{"display_name":"a"}}\r\n--b0\r\ncontent-type: application/pdf\r\n\r\n%PDF-1.4\n', "\r\n--b0--\r\n"],
    wrongType: "application/json",
    auth: (key) => ({ "x-goog-api-key": key }),
    budgeted: false
  },
  { name: "admin keys", family: "gateway", path: "/gateway/admin/keys", missing: "/gateway/admin/nowhere", contentType: "application/json", wrongType: "text/plain", auth: bearer, budgeted: true }
]

const codes: Record<number, string> = { 401: "invalid_api_key", 404: "not_found", 413: "request_body_too_large", 415: "unsupported_media_type", 503: "server_busy" }
const messagesTypes: Record<number, string> = { 401: "authentication_error", 404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error", 503: "api_error" }
const geminiStatuses: Record<number, string> = { 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 503: "UNAVAILABLE" }

interface Answer {
  readonly status: number
  readonly contentType: string
  readonly requestId: string | null
  readonly body: string
}

/** What the client received: the answer, or why there was none. */
const send = async (url: string, init: RequestInit): Promise<Answer | string> => {
  try {
    const r = await fetch(url, init)
    return { status: r.status, contentType: r.headers.get("content-type") ?? "", requestId: r.headers.get("x-gateway-request-id"), body: await r.text() }
  } catch (error) {
    return failureOf(error)
  }
}

const failureOf = (error: unknown): string => {
  const cause = (error as { cause?: { code?: unknown; message?: unknown } }).cause
  return `${String(error)}${cause === undefined ? "" : ` (${String(cause.code ?? cause.message)})`}`
}

/** The answer is the family's error envelope for `status`. */
const expectEnvelope = (family: Family, answer: Answer, status: number) => {
  expect(answer.status, answer.body).toBe(status)
  expect(answer.requestId).toMatch(/^req_/)
  const json = JSON.parse(answer.body) as Json
  const error = json.error as Json
  switch (family) {
    case "openai":
      expect(answer.contentType).toMatch(/^application\/json/)
      expect(Object.keys(error).sort()).toEqual(["code", "message", "param", "type"])
      expect(error.code).toBe(codes[status])
      return
    case "messages":
      expect(json.type).toBe("error")
      expect(error.type).toBe(messagesTypes[status])
      return
    case "gemini":
      expect(error.code).toBe(status)
      expect(error.status).toBe(geminiStatuses[status])
      return
    case "gateway":
      expect(answer.contentType).toMatch(/^application\/problem\+json/)
      expect(json.status).toBe(status)
      expect(json.code).toBe(codes[status])
  }
}

/** Send the same refused request `times` times; every one must come back with its envelope. */
const expectEveryTime = async (route: Route, status: number, times: number, request: () => { readonly url: string; readonly init: RequestInit }) => {
  const failures: Array<string> = []
  for (let i = 0; i < times; i++) {
    const { url, init } = request()
    const answer = await send(url, init)
    if (typeof answer === "string") failures.push(`#${i}: ${answer}`)
    else expectEnvelope(route.family, answer, status)
  }
  expect(failures).toEqual([])
}

interface Refusal {
  readonly status: number
  readonly size: number
  readonly path: (route: Route) => string
  readonly headers: (route: Route) => Record<string, string>
  readonly applies: (route: Route) => boolean
}

const refusals: ReadonlyArray<Refusal> = [
  { status: 401, size: BIG, path: (r) => r.path, headers: (r) => ({ ...r.auth(BAD), "content-type": r.contentType }), applies: () => true },
  // under maxBodyBytes: the Files routes check the declared length first
  { status: 415, size: MEDIUM, path: (r) => r.path, headers: (r) => ({ ...r.auth(r.family === "gateway" ? ADMIN : KEY), "content-type": r.wrongType }), applies: () => true },
  { status: 404, size: BIG, path: (r) => r.missing, headers: (r) => ({ ...r.auth(r.family === "gateway" ? ADMIN : KEY), "content-type": r.contentType }), applies: () => true },
  { status: 413, size: BIG, path: (r) => r.path, headers: (r) => ({ ...r.auth(r.family === "gateway" ? ADMIN : KEY), "content-type": r.contentType }), applies: () => true }
]
const busy: Refusal = { status: 503, size: MEDIUM, path: (r) => r.path, headers: (r) => ({ ...r.auth(r.family === "gateway" ? ADMIN : KEY), "content-type": r.contentType }), applies: (r) => r.budgeted }

const fetchCases = (refusal: Refusal) => {
  for (const route of routes.filter(refusal.applies)) {
    it(`${route.name}: ${refusal.status}, ${refusal.size / MiB} MiB with Content-Length, ${REPEAT} times`, () =>
      expectEveryTime(route, refusal.status, REPEAT, () => ({
        url: base + refusal.path(route),
        init: { method: "POST", headers: refusal.headers(route), body: bodyOf(refusal.size, ...(route.frame ?? [])) }
      })))
    it(`${route.name}: ${refusal.status}, ${refusal.size / MiB} MiB chunked, ${CHUNKED_REPEAT} times`, () =>
      expectEveryTime(route, refusal.status, CHUNKED_REPEAT, () => ({
        url: base + refusal.path(route),
        init: { method: "POST", headers: refusal.headers(route), body: chunked(bodyOf(refusal.size, ...(route.frame ?? []))), duplex: "half" } as RequestInit
      })))
  }
}

describe("a refusal reaches Node's fetch while it is still sending a large body", () => {
  for (const refusal of refusals) fetchCases(refusal)
})

/** The SDK's error for a call that must fail; a connection error (no answer) fails the test. */
const sdkErrors = async (call: () => Promise<unknown>): Promise<Array<unknown>> => {
  const errors: Array<unknown> = []
  for (let i = 0; i < REPEAT; i++) {
    const error = await call().then(
      () => new Error("the call succeeded"),
      (e: unknown) => e
    )
    errors.push(error)
  }
  return errors
}

const text = (size: number) => "x".repeat(size)

const openai = (key: string) => new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0, timeout: 20_000 })
const anthropic = (key: string) => new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 20_000 })
const genai = (key: string) => new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: base, retryOptions: { attempts: 1 } } as never })

const openAiStatuses = (errors: Array<unknown>, status: number) => {
  for (const error of errors) {
    expect(error, failureOf(error)).toBeInstanceOf(OpenAI.APIError)
    expect((error as InstanceType<typeof OpenAI.APIError>).status, failureOf(error)).toBe(status)
    expect((error as InstanceType<typeof OpenAI.APIError>).code).toBe(codes[status])
  }
}
const anthropicStatuses = (errors: Array<unknown>, status: number) => {
  for (const error of errors) {
    expect(error, failureOf(error)).toBeInstanceOf(Anthropic.APIError)
    expect((error as InstanceType<typeof Anthropic.APIError>).status, failureOf(error)).toBe(status)
    expect(((error as InstanceType<typeof Anthropic.APIError>).error as { error: Json }).error.type).toBe(messagesTypes[status])
  }
}
const genaiStatuses = (errors: Array<unknown>, status: number) => {
  for (const error of errors) {
    expect((error as { status?: unknown }).status, failureOf(error)).toBe(status)
    expect((error as Error).message).toContain(geminiStatuses[status])
  }
}

/** The model calls of the three SDKs with a prompt of `size` bytes, each refused REPEAT times with `status`. */
const sdkModelCases = (what: string, status: number, size: number, key: string) => {
  it(`openai chat.completions.create: ${what} is ${status}, ${REPEAT} times`, async () => {
    const client = openai(key)
    openAiStatuses(await sdkErrors(() => client.chat.completions.create({ model: "mock/echo", messages: [{ role: "user", content: text(size) }] })), status)
  })
  it(`openai responses.create: ${what} is ${status}, ${REPEAT} times`, async () => {
    const client = openai(key)
    openAiStatuses(await sdkErrors(() => client.responses.create({ model: "mock/echo", input: text(size) })), status)
  })
  it(`anthropic messages.create: ${what} is ${status}, ${REPEAT} times`, async () => {
    const client = anthropic(key)
    anthropicStatuses(await sdkErrors(() => client.messages.create({ model: "mock/echo", max_tokens: 16, messages: [{ role: "user", content: text(size) }] })), status)
  })
  it(`genai models.generateContent: ${what} is ${status}, ${REPEAT} times`, async () => {
    const client = genai(key)
    genaiStatuses(await sdkErrors(() => client.models.generateContent({ model: "mock/echo", contents: text(size) })), status)
  })
}

describe("a refusal reaches the official SDKs while they send a large body", () => {
  sdkModelCases("a bad key", 401, BIG, BAD)
  sdkModelCases("a body over maxBodyBytes", 413, BIG, KEY)
  for (const [what, status] of [["a bad key", 401], ["a file over maxBodyBytes", 413]] as const) {
    const key = status === 401 ? BAD : KEY
    it(`openai files.create: ${what} is ${status}, ${REPEAT} times`, async () => {
      const client = openai(key)
      const file = await toFile(bodyOf(BIG), "big.txt")
      openAiStatuses(await sdkErrors(() => client.files.create({ file, purpose: "user_data" })), status)
    })
    it(`anthropic beta.files.upload: ${what} is ${status}, ${REPEAT} times`, async () => {
      const client = anthropic(key)
      const file = await anthropicFile(bodyOf(BIG), "big.txt")
      anthropicStatuses(await sdkErrors(() => client.beta.files.upload({ file })), status)
    })
  }
})

describe("server_busy reaches fetch and the SDKs while they send a large body", () => {
  // a body that declares HELD bytes and sends none holds them against maxBodyBytesInFlight
  let holder: Awaited<ReturnType<typeof connect>> | undefined
  beforeAll(async () => {
    holder = await connect()
    holder.socket.write(head("/v1/chat/completions", { ...bearer(KEY), "content-type": "application/json", "content-length": String(HELD) }))
    const probe = () => send(`${base}/v1/chat/completions`, { method: "POST", headers: { ...bearer(KEY), "content-type": "application/json" }, body: bodyOf(MEDIUM) })
    await until("the held body to take its share of the budget", async () => {
      const answer = await probe()
      return typeof answer !== "string" && answer.status === 503
    })
  })
  afterAll(() => holder?.socket.destroy())

  fetchCases(busy)
  sdkModelCases("server_busy", 503, MEDIUM, KEY)
})

/** A raw client connection that records what it receives and how it ends. */
const connect = (): Promise<{
  readonly socket: net.Socket
  readonly received: () => string
  readonly state: { closed: boolean; ended: boolean; error: string | undefined; written: number }
}> =>
  new Promise((resolve, reject) => {
    // half-open: the client keeps sending after the gateway's FIN, as a client sending its body does
    const socket = net.connect({ host: "127.0.0.1", port, allowHalfOpen: true }, () => {
      socket.off("error", reject)
      const chunks: Array<Buffer> = []
      const state = { closed: false, ended: false, error: undefined as string | undefined, written: 0 }
      socket.on("data", (chunk: Buffer) => chunks.push(chunk))
      socket.on("end", () => (state.ended = true))
      socket.on("error", (error: NodeJS.ErrnoException) => (state.error = error.code ?? error.message))
      socket.on("close", () => (state.closed = true))
      resolve({ socket, received: () => Buffer.concat(chunks).toString("latin1"), state })
    })
    socket.once("error", reject)
  })

const head = (path: string, headers: Readonly<Record<string, string>>) =>
  `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("")}\r\n`

/**
 * Write `piece` until the socket is gone, waiting for the socket to take more. Between two writes
 * the event loop polls the socket once (setImmediate runs after the poll phase), as a client that
 * reads while it sends does: the answer is read as soon as it arrives. Without that, the loop can
 * write synchronously for as long as the kernel takes the bytes, and when the gateway's reset comes
 * the failed write destroys the socket with the answer still unread in the kernel.
 */
const sendUntilClosed = async (conn: Awaited<ReturnType<typeof connect>>, piece: Buffer, pauseMs = 0): Promise<void> => {
  while (!conn.state.closed && !conn.socket.destroyed) {
    conn.state.written += piece.length
    const more = conn.socket.write(piece)
    if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs))
    else if (!more) await new Promise((resolve) => (conn.socket.once("drain", resolve), conn.socket.once("close", resolve)))
    else await new Promise((resolve) => setImmediate(resolve))
  }
}

describe("the drain after a refusal is bounded", () => {
  it("a client that sends its body only after the answer arrives is read to the end and sees a clean close, not a reset", async () => {
    const conn = await connect()
    const size = 2 * MiB
    conn.socket.write(head("/v1/chat/completions", { ...bearer(BAD), "content-type": "application/json", "content-length": String(size) }))
    await until("the 401", () => conn.received().includes("invalid_api_key"), 10_000)
    expect(conn.received()).toMatch(/^HTTP\/1\.1 401 /)
    expect(conn.received().toLowerCase()).toContain("connection: close")
    // the answer is in: only now does the body go out, all of it
    await new Promise<void>((resolve) => conn.socket.write(bodyOf(size), () => resolve()))
    await until("the gateway to close", () => conn.state.ended, 10_000)
    conn.socket.end()
    await until("the socket to close", () => conn.state.closed, 10_000)
    expect(conn.state.error).toBeUndefined()
  })

  it(`a client that never stops sending (Content-Length of 10 GiB, over maxBodyBytes) gets its 413 and is cut off after at most ${lingerBounds.maxBytes / MiB} MiB more`, async () => {
    const conn = await connect()
    conn.socket.write(head("/v1/chat/completions", { ...bearer(KEY), "content-type": "application/json", "content-length": String(10 * 1024 * MiB) }))
    await sendUntilClosed(conn, Buffer.alloc(256 * 1024, 0x20))
    expect(conn.received()).toMatch(/^HTTP\/1\.1 413 /)
    expect(conn.received()).toContain("request_body_too_large")
    // read by the gateway: at most the bound; the rest sat in the two kernels' socket buffers
    expect(conn.state.written).toBeLessThan(lingerBounds.maxBytes + 48 * MiB)
  })

  it("a chunked body that never ends on a refused request is cut off too", async () => {
    const conn = await connect()
    conn.socket.write(head("/v1/messages", { "x-api-key": BAD, "anthropic-version": "2023-06-01", "content-type": "application/json", "transfer-encoding": "chunked" }))
    const data = Buffer.alloc(256 * 1024, 0x20)
    await sendUntilClosed(conn, Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from("\r\n")]))
    expect(conn.received()).toMatch(/^HTTP\/1\.1 401 /)
    expect(conn.received()).toContain("authentication_error")
    expect(conn.state.written).toBeLessThan(lingerBounds.maxBytes + 48 * MiB)
  })

  it(`a client that keeps sending slowly (more often than every ${lingerBounds.idleMs} ms) is cut off after ${lingerBounds.maxMs} ms`, async () => {
    const conn = await connect()
    conn.socket.write(head("/v1beta/models/x:generateContent", { "x-goog-api-key": BAD, "content-type": "application/json", "content-length": String(MiB) }))
    // a backstop only: the gateway closes after its bound, long before the body could be complete
    await Promise.race([sendUntilClosed(conn, Buffer.alloc(64, 0x20), lingerBounds.idleMs / 5), until("the gateway to close", () => conn.state.closed, 20_000)])
    expect(conn.state.closed).toBe(true)
    expect(conn.state.written).toBeLessThan(MiB)
    expect(conn.received()).toMatch(/^HTTP\/1\.1 401 /)
    expect(conn.received()).toContain("UNAUTHENTICATED")
  })
})
