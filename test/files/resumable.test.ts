/**
 * Gemini-style uploads over raw HTTP (spec 3 "Resumable upload" rows, 4.4 Gemini-style, 8): the
 * resumable protocol (start → upload URL → chunks at the right offset → finalize), who may send a
 * chunk, the 4-unfinished cap, both header spellings, `uploadType=multipart` (multipart/related)
 * and `uploadType=media`, and the upload URL's origin on a wildcard listener and behind a trusted
 * proxy. Gateways run in this process on real sockets; every one is closed after the suite.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { call, jsonOf, KiB, MiB, open, pngBytes, relatedBody, sha256, sleep, tempFiles, textBytes, type Answer } from "./uploadWire.js"

const KEYS = {
  g1: "sk-gemini-one-0123456789",
  g2: "sk-gemini-two-0123456789",
  g3: "sk-gemini-three-0123456789",
  g4: "sk-gemini-four-0123456789",
  g5: "sk-gemini-five-0123456789"
} as const

const document = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  providers: { mock: { type: "mock" } },
  keys: Object.entries(KEYS).map(([app, key]) => ({ key, app })),
  ...extra
})

const gateways: Array<TestGateway> = []
let gw: TestGateway

beforeAll(async () => {
  gw = await startGateway(document())
  gateways.push(gw)
})

afterAll(async () => {
  for (const g of gateways) await g.close()
})

const UPLOAD_URL = /^(https?:\/\/[^/]+)\/upload\/v1beta\/files\?upload_id=([0-9a-f]{32})&upload_protocol=resumable$/

type Spelling = "goog" | "genai"

interface Started {
  readonly answer: Answer
  readonly url: string
  /** path and query of the upload URL: what the SDK sends the chunks to */
  readonly target: string
  readonly id: string
  readonly origin: string
}

/** A resumable start, as @google/genai sends it (or with the neutral header spelling). */
const startUpload = async (
  port: number,
  key: string | undefined,
  options: {
    readonly length: number
    readonly type?: string
    readonly displayName?: string
    readonly spelling?: Spelling
    readonly headers?: Readonly<Record<string, string>>
  }
): Promise<Started> => {
  const s = options.spelling ?? "goog"
  const body = JSON.stringify({ file: { ...(options.displayName !== undefined ? { displayName: options.displayName } : {}), mimeType: options.type ?? "image/png" } })
  const answer = await call(
    port,
    "POST",
    "/upload/v1beta/files",
    {
      "content-type": "application/json",
      ...(key !== undefined ? { [s === "goog" ? "x-goog-api-key" : "x-genai-api-key"]: key } : {}),
      [`x-${s}-upload-protocol`]: "resumable",
      [`x-${s}-upload-command`]: "start",
      [`x-${s}-upload-header-content-length`]: String(options.length),
      [`x-${s}-upload-header-content-type`]: options.type ?? "image/png",
      ...options.headers
    },
    body
  )
  const url = String(answer.headers[`x-${s}-upload-url`] ?? "")
  const match = UPLOAD_URL.exec(url)
  if (answer.status !== 200 || match === null) return { answer, url, target: "", id: "", origin: "" }
  const parsed = new URL(url)
  return { answer, url, target: `${parsed.pathname}${parsed.search}`, id: match[2], origin: match[1] }
}

/** One chunk to an upload URL, as the SDK sends it (Content-Type application/json on raw bytes). */
const sendChunk = (
  port: number,
  target: string,
  key: string | undefined,
  command: string,
  offset: number | string | undefined,
  bytes: Buffer,
  spelling: Spelling = "goog"
) =>
  call(
    port,
    "POST",
    target,
    {
      "content-type": "application/json",
      ...(key !== undefined ? { "x-goog-api-key": key } : {}),
      [`x-${spelling}-upload-command`]: command,
      ...(offset !== undefined ? { [`x-${spelling}-upload-offset`]: String(offset) } : {})
    },
    bytes
  )

const geminiError = (answer: Answer) => jsonOf(answer).error as { code: number; status: string; message: string }

const fileOf = (answer: Answer) => jsonOf(answer).file as Record<string, unknown>

const hexOf = (file: Record<string, unknown>) => String(file.name).replace(/^files\//, "")

/** The stored bytes of a file, through the chat-style download route. */
const download = async (port: number, key: string, hex: string) => {
  const answer = await call(port, "GET", `/v1/files/file-${hex}/content`, { authorization: `Bearer ${key}` })
  expect(answer.status, answer.text).toBe(200)
  return answer.body
}

const listNames = async (port: number, key: string): Promise<Array<string>> => {
  const answer = await call(port, "GET", "/v1beta/files?pageSize=100", { "x-goog-api-key": key })
  expect(answer.status, answer.text).toBe(200)
  return ((jsonOf(answer).files ?? []) as Array<Record<string, unknown>>).map((f) => String(f.name))
}

describe("resumable protocol", () => {
  it("start → absolute upload URL on the address reached; chunks at the right offset; wrong offset 400; empty chunk adds nothing; finalize → {file} + final", async () => {
    const data = pngBytes(300 * KiB + 123)
    const started = await startUpload(gw.port, KEYS.g1, { length: data.length, displayName: "holiday photo" })
    expect(started.answer.status, started.answer.text).toBe(200)
    expect(started.url).toMatch(UPLOAD_URL)
    expect(started.origin).toBe(`http://127.0.0.1:${gw.port}`)
    expect(started.answer.headers["x-genai-upload-url"]).toBe(started.url)
    expect(started.answer.headers["x-goog-upload-status"]).toBe("active")
    expect(started.answer.headers["x-genai-upload-status"]).toBe("active")

    const first = data.subarray(0, 100 * KiB)
    const second = data.subarray(100 * KiB, 200 * KiB)
    const last = data.subarray(200 * KiB)

    const c1 = await sendChunk(gw.port, started.target, KEYS.g1, "upload", 0, first)
    expect(c1.status, c1.text).toBe(200)
    expect(c1.headers["x-goog-upload-status"]).toBe("active")
    expect(c1.headers["x-goog-upload-size-received"]).toBe(String(first.length))

    // the same chunk again (offset 0 is now wrong): 400, and the upload goes on
    const again = await sendChunk(gw.port, started.target, KEYS.g1, "upload", 0, first)
    expect(again.status, again.text).toBe(400)
    expect(geminiError(again).status).toBe("INVALID_ARGUMENT")
    expect(geminiError(again).message).toContain(String(first.length))
    // an offset past the bytes received, and one that is not a number
    expect((await sendChunk(gw.port, started.target, KEYS.g1, "upload", 2 * first.length, second)).status).toBe(400)
    expect((await sendChunk(gw.port, started.target, KEYS.g1, "upload", "abc", second)).status).toBe(400)

    // a chunk with no bytes adds nothing
    const empty = await sendChunk(gw.port, started.target, KEYS.g1, "upload", first.length, Buffer.alloc(0))
    expect(empty.status, empty.text).toBe(200)
    expect(empty.headers["x-goog-upload-status"]).toBe("active")
    expect(empty.headers["x-goog-upload-size-received"]).toBe(String(first.length))

    const c2 = await sendChunk(gw.port, started.target, KEYS.g1, "upload", first.length, second)
    expect(c2.status, c2.text).toBe(200)
    expect(c2.headers["x-goog-upload-status"]).toBe("active")
    expect(c2.headers["x-goog-upload-size-received"]).toBe(String(200 * KiB))

    const done = await sendChunk(gw.port, started.target, KEYS.g1, "upload, finalize", 200 * KiB, last)
    expect(done.status, done.text).toBe(200)
    expect(done.headers["x-goog-upload-status"]).toBe("final")
    expect(done.headers["x-genai-upload-status"]).toBe("final")
    expect(done.headers["content-type"]).toMatch(/^application\/json/)
    const file = fileOf(done)
    expect(file).toMatchObject({
      displayName: "holiday photo",
      mimeType: "image/png",
      sizeBytes: String(data.length),
      state: "ACTIVE",
      source: "UPLOADED"
    })
    expect(String(file.name)).toMatch(/^files\/[0-9a-f]{32}$/)
    expect(file.uri).toBe(`http://127.0.0.1:${gw.port}/v1beta/files/${hexOf(file)}`)

    const got = await call(gw.port, "GET", `/v1beta/files/${hexOf(file)}`, { "x-goog-api-key": KEYS.g1 })
    expect(got.status, got.text).toBe(200)
    expect(jsonOf(got)).toEqual(file)
    expect(sha256(await download(gw.port, KEYS.g1, hexOf(file)))).toBe(sha256(data))

    // the finished upload is gone: its URL is unknown now
    expect((await sendChunk(gw.port, started.target, KEYS.g1, "upload", data.length, Buffer.from("x"))).status).toBe(404)
    expect((await sendChunk(gw.port, started.target, undefined, "upload", data.length, Buffer.from("x"))).status).toBe(401)
    expect(tempFiles(gw.dataDir)).toEqual([])
  })

  it("one chunk `upload, finalize` (the SDK's way for files up to 8 MiB); a text file keeps its declared type", async () => {
    const data = textBytes(10 * KiB)
    const started = await startUpload(gw.port, KEYS.g1, { length: data.length, type: "text/markdown", displayName: "notes.md" })
    expect(started.answer.status, started.answer.text).toBe(200)
    const done = await sendChunk(gw.port, started.target, KEYS.g1, "upload, finalize", 0, data)
    expect(done.status, done.text).toBe(200)
    expect(fileOf(done)).toMatchObject({ displayName: "notes.md", mimeType: "text/markdown", sizeBytes: String(data.length) })
    expect((await download(gw.port, KEYS.g1, hexOf(fileOf(done)))).equals(data)).toBe(true)
  })

  it("a start declaring more than one file may hold is 413 at once", async () => {
    const started = await startUpload(gw.port, KEYS.g1, { length: 32 * MiB + 1 })
    expect(started.answer.status, started.answer.text).toBe(413)
    expect(started.answer.headers["x-goog-upload-url"]).toBeUndefined()
  })
})

describe("who may send a chunk", () => {
  it("a chunk with no key runs as the app that started the upload", async () => {
    const data = pngBytes(20 * KiB)
    const started = await startUpload(gw.port, KEYS.g1, { length: data.length, displayName: "keyless chunks" })
    expect(started.answer.status).toBe(200)
    const c1 = await sendChunk(gw.port, started.target, undefined, "upload", 0, data.subarray(0, 5000))
    expect(c1.status, c1.text).toBe(200)
    expect(c1.headers["x-goog-upload-status"]).toBe("active")
    const done = await sendChunk(gw.port, started.target, undefined, "upload, finalize", 5000, data.subarray(5000))
    expect(done.status, done.text).toBe(200)
    const name = String(fileOf(done).name)
    // the file is g1's, not the keyless default app's nor g2's
    expect(await listNames(gw.port, KEYS.g1)).toContain(name)
    expect(await listNames(gw.port, KEYS.g2)).not.toContain(name)
    expect((await call(gw.port, "GET", `/v1beta/${name}`, { "x-goog-api-key": KEYS.g2 })).status).toBe(404)
    expect(sha256(await download(gw.port, KEYS.g1, hexOf(fileOf(done))))).toBe(sha256(data))
  })

  it("an unknown upload id: 401 without a key, 404 with one (also a malformed id); a wrong key is 401", async () => {
    const unknown = `/upload/v1beta/files?upload_id=${randomBytes(16).toString("hex")}&upload_protocol=resumable`
    const noKey = await sendChunk(gw.port, unknown, undefined, "upload, finalize", 0, pngBytes(100))
    expect(noKey.status, noKey.text).toBe(401)
    expect(geminiError(noKey).status).toBe("UNAUTHENTICATED")
    const withKey = await sendChunk(gw.port, unknown, KEYS.g1, "upload, finalize", 0, pngBytes(100))
    expect(withKey.status, withKey.text).toBe(404)
    expect(geminiError(withKey).status).toBe("NOT_FOUND")
    const malformed = "/upload/v1beta/files?upload_id=../../etc&upload_protocol=resumable"
    expect((await sendChunk(gw.port, malformed, undefined, "upload", 0, pngBytes(100))).status).toBe(401)
    expect((await sendChunk(gw.port, malformed, KEYS.g1, "upload", 0, pngBytes(100))).status).toBe(404)
    expect((await sendChunk(gw.port, unknown, "sk-not-a-key-0123456789", "upload", 0, pngBytes(100))).status).toBe(401)
  })

  it("another app's key on a live upload is 404, and the upload stays its owner's", async () => {
    const data = pngBytes(8 * KiB)
    const started = await startUpload(gw.port, KEYS.g1, { length: data.length })
    expect(started.answer.status).toBe(200)
    const stranger = await sendChunk(gw.port, started.target, KEYS.g2, "upload, finalize", 0, data)
    expect(stranger.status, stranger.text).toBe(404)
    expect(geminiError(stranger).status).toBe("NOT_FOUND")
    const owner = await sendChunk(gw.port, started.target, KEYS.g1, "upload, finalize", 0, data)
    expect(owner.status, owner.text).toBe(200)
    expect(fileOf(owner).sizeBytes).toBe(String(data.length))
    expect(await listNames(gw.port, KEYS.g2)).not.toContain(String(fileOf(owner).name))
  })
})

describe("unfinished uploads", () => {
  it("a 5th unfinished upload of an app is 429; another app is not affected; finishing one frees a place", async () => {
    const open4: Array<Started> = []
    for (let i = 0; i < 4; i++) {
      const started = await startUpload(gw.port, KEYS.g3, { length: 1000 })
      expect(started.answer.status, started.answer.text).toBe(200)
      open4.push(started)
    }
    const fifth = await startUpload(gw.port, KEYS.g3, { length: 1000 })
    expect(fifth.answer.status, fifth.answer.text).toBe(429)
    expect(geminiError(fifth.answer).status).toBe("RESOURCE_EXHAUSTED")
    expect(fifth.answer.headers["retry-after"]).toBeDefined()

    const other = await startUpload(gw.port, KEYS.g4, { length: 1000 })
    expect(other.answer.status, other.answer.text).toBe(200)

    // the unfinished ones still take chunks; finishing one frees a place
    const data = pngBytes(1000)
    const done = await sendChunk(gw.port, open4[0].target, KEYS.g3, "upload, finalize", 0, data)
    expect(done.status, done.text).toBe(200)
    const again = await startUpload(gw.port, KEYS.g3, { length: 1000 })
    expect(again.answer.status, again.answer.text).toBe(200)
  })

  it("a failed chunk (bytes that are not an accepted kind) ends the upload and leaves no temp file", async () => {
    const started = await startUpload(gw.port, KEYS.g4, { length: 64, type: "application/octet-stream" })
    expect(started.answer.status).toBe(200)
    const bad = await sendChunk(gw.port, started.target, KEYS.g4, "upload, finalize", 0, randomBytes(64).fill(0, 0, 4))
    expect(bad.status, bad.text).toBe(400)
    expect((await sendChunk(gw.port, started.target, KEYS.g4, "upload", 0, pngBytes(64))).status).toBe(404)
  })
})

describe("header spellings and upload types", () => {
  it("the neutral X-Genai-Upload-* spellings work for the start and the chunks", async () => {
    const data = pngBytes(40 * KiB)
    const started = await startUpload(gw.port, KEYS.g2, { length: data.length, displayName: "neutral", spelling: "genai" })
    expect(started.answer.status, started.answer.text).toBe(200)
    expect(started.answer.headers["x-genai-upload-status"]).toBe("active")
    const c1 = await sendChunk(gw.port, started.target, KEYS.g2, "upload", 0, data.subarray(0, 10 * KiB), "genai")
    expect(c1.status, c1.text).toBe(200)
    expect(c1.headers["x-genai-upload-status"]).toBe("active")
    const done = await sendChunk(gw.port, started.target, KEYS.g2, "upload, finalize", 10 * KiB, data.subarray(10 * KiB), "genai")
    expect(done.status, done.text).toBe(200)
    expect(done.headers["x-genai-upload-status"]).toBe("final")
    expect(fileOf(done)).toMatchObject({ displayName: "neutral", sizeBytes: String(data.length) })
    expect(sha256(await download(gw.port, KEYS.g2, hexOf(fileOf(done))))).toBe(sha256(data))
  })

  it("uploadType=media is 400; no protocol at all is 400", async () => {
    const media = await call(gw.port, "POST", "/upload/v1beta/files?uploadType=media", { "x-goog-api-key": KEYS.g2, "content-type": "image/png" }, pngBytes(100))
    expect(media.status, media.text).toBe(400)
    expect(geminiError(media).status).toBe("INVALID_ARGUMENT")
    const none = await call(gw.port, "POST", "/upload/v1beta/files", { "x-goog-api-key": KEYS.g2, "content-type": "application/json" }, "{}")
    expect(none.status, none.text).toBe(400)
  })

  it("uploadType=multipart (multipart/related: JSON metadata, then the file) stores the file", async () => {
    const data = pngBytes(50 * KiB)
    const body = relatedBody({ file: { displayName: "related one" } }, data)
    const answer = await call(gw.port, "POST", "/upload/v1beta/files?uploadType=multipart", { "x-goog-api-key": KEYS.g2, "content-type": body.contentType }, body.body)
    expect(answer.status, answer.text).toBe(200)
    const file = fileOf(answer)
    expect(file).toMatchObject({ displayName: "related one", mimeType: "image/png", sizeBytes: String(data.length), state: "ACTIVE" })
    expect(sha256(await download(gw.port, KEYS.g2, hexOf(file)))).toBe(sha256(data))
  })

  it("uploadType=multipart with the body split across many TCP writes (delimiter look-alikes in the file) stores the exact bytes", async () => {
    const boundary = "xyzBOUNDARYxyz"
    // the file holds near-misses of the delimiter, so a split inside one must not end the part early
    const data = Buffer.concat([pngBytes(3000), Buffer.from(`\r\n--${boundary.slice(0, 7)}\r\n--xyz\r\n-`), pngBytes(3000).subarray(8), Buffer.from("\r\n--xyzBOUNDARYxy")])
    const body = relatedBody({ file: { displayName: "split" } }, data, "image/png", boundary)
    const request = open(gw.port, "POST", "/upload/v1beta/files?uploadType=multipart", {
      "x-goog-api-key": KEYS.g2,
      "content-type": body.contentType,
      "content-length": body.body.length
    })
    // pieces of 1..40 bytes with a pause after each, so they arrive as separate reads
    let at = 0
    let n = 0
    while (at < body.body.length) {
      const size = 1 + ((n * 7919) % 40)
      await request.write(body.body.subarray(at, at + size))
      at += size
      n++
      if (n % 4 === 0) await sleep(1)
    }
    await request.end()
    const answer = await request.answer
    expect(answer.status, answer.text).toBe(200)
    expect(n).toBeGreaterThan(100)
    const file = fileOf(answer)
    expect(file.sizeBytes).toBe(String(data.length))
    expect((await download(gw.port, KEYS.g2, hexOf(file))).equals(data)).toBe(true)
  })

  it("uploadType=multipart with no file part is 400 and stores nothing", async () => {
    const boundary = "onlymeta"
    const body = Buffer.from(`--${boundary}\r\nContent-Type: application/json\r\n\r\n{"file":{"displayName":"x"}}\r\n--${boundary}--\r\n`)
    const before = await listNames(gw.port, KEYS.g5)
    const answer = await call(gw.port, "POST", "/upload/v1beta/files?uploadType=multipart", {
      "x-goog-api-key": KEYS.g5,
      "content-type": `multipart/related; boundary=${boundary}`
    }, body)
    expect(answer.status, answer.text).toBe(400)
    expect(await listNames(gw.port, KEYS.g5)).toEqual(before)
  })
})

describe("the upload URL carries the address the caller reached", () => {
  it("on a wildcard listener (0.0.0.0) it follows the request Host; X-Forwarded-* are ignored without trustProxy", async () => {
    const wild = await startGateway(document({ listen: { host: "0.0.0.0" } }))
    gateways.push(wild)
    const data = pngBytes(2 * KiB)
    const started = await startUpload(wild.port, KEYS.g1, {
      length: data.length,
      headers: { host: "files.example.test:8443", "x-forwarded-host": "evil.example", "x-forwarded-proto": "https" }
    })
    expect(started.answer.status, started.answer.text).toBe(200)
    expect(started.origin).toBe("http://files.example.test:8443")
    // the SDK keeps the URL's path and query and sends them to its own base URL
    const done = await sendChunk(wild.port, started.target, KEYS.g1, "upload, finalize", 0, data)
    expect(done.status, done.text).toBe(200)
    expect(String(fileOf(done).uri)).toMatch(new RegExp(`^http://127\\.0\\.0\\.1:${wild.port}/v1beta/files/[0-9a-f]{32}$`))

    const loop = await startUpload(wild.port, KEYS.g1, { length: 10, headers: { host: `localhost:${wild.port}` } })
    expect(loop.origin).toBe(`http://localhost:${wild.port}`)
  })

  it("with listen.trustProxy: true it follows X-Forwarded-Host and X-Forwarded-Proto; without them the listen address", async () => {
    const proxied = await startGateway(document({ listen: { trustProxy: true } }))
    gateways.push(proxied)
    const data = pngBytes(2 * KiB)
    const started = await startUpload(proxied.port, KEYS.g1, {
      length: data.length,
      headers: { "x-forwarded-host": "gw.public.example", "x-forwarded-proto": "https" }
    })
    expect(started.answer.status, started.answer.text).toBe(200)
    expect(started.origin).toBe("https://gw.public.example")
    const done = await sendChunk(proxied.port, started.target, KEYS.g1, "upload, finalize", 0, data, "goog")
    expect(done.status, done.text).toBe(200)

    const plainProto = await startUpload(proxied.port, KEYS.g1, { length: 10, headers: { "x-forwarded-host": "gw.public.example:8080" } })
    expect(plainProto.origin).toBe("http://gw.public.example:8080")
    const direct = await startUpload(proxied.port, KEYS.g1, { length: 10 })
    expect(direct.origin).toBe(`http://127.0.0.1:${proxied.port}`)
  })

  it("on a loopback listener without trustProxy it is the listen address, whatever X-Forwarded-Host says", async () => {
    const started = await startUpload(gw.port, KEYS.g5, { length: 10, headers: { "x-forwarded-host": "evil.example", host: `localhost:${gw.port}` } })
    expect(started.answer.status, started.answer.text).toBe(200)
    expect(started.origin).toBe(`http://127.0.0.1:${gw.port}`)
  })
})
