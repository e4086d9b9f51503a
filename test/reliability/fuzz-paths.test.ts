/**
 * Hostile paths and names (issue 9): path traversal in file ids on every Files route of the three
 * shapes (404/400 in the family's envelope, nothing outside the data dir read, written or removed);
 * hostile file names on upload (`../`, CR/LF, quotes, backslashes, unicode, lone surrogates) are
 * stored harmlessly and come back in a `Content-Disposition` without header injection (plain
 * `filename` of safe ASCII, RFC 5987 `filename*` that decodes to the name); percent-encoding tricks
 * in Gemini model paths (`%2F`, `%252F`, `%00`, `..`, overlong) give the right model or a clean
 * 400/404 in the Gemini envelope, and never move a request to another path on the upstream.
 */
import fc from "fast-check"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeGeminiUpstream, type FakeGeminiUpstream } from "../support/FakeGeminiUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { rawCall, type RawReply } from "../support/RawHttp.js"

type Json = Record<string, unknown>

const KEY = "sk-fuzz-paths-0123456789"
const TEXT = Buffer.from("the stored file's own bytes\n")
const CANARY = `canary ${randomBytes(8).toString("hex")}`

let root: string
let dataDir: string
let canaryPath: string
let gw: TestGateway
let geminiUp: FakeGeminiUpstream
/** a live file: `file-<hex>` */
let fileId: string

const openaiAuth = { authorization: `Bearer ${KEY}` }
const messagesAuth = { "x-api-key": KEY, "anthropic-version": "2023-06-01" }
const geminiAuth = { "x-goog-api-key": KEY }

/**
 * Every file below `dir` with its size, relative names sorted. The database's own files change
 * whatever the requests do (a checkpoint copies the WAL into `gateway.db` every second): named only.
 */
const snapshot = (dir: string): Array<string> => {
  const out: Array<string> = []
  const walk = (d: string) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, entry.name)
      if (entry.isDirectory()) walk(full)
      else if (entry.name === "gateway.db") out.push(path.relative(dir, full))
      else if (!/-(wal|shm|journal)$/.test(entry.name)) out.push(`${path.relative(dir, full)}:${fs.statSync(full).size}`)
    }
  }
  walk(dir)
  return out.sort()
}

/** Lone surrogates as U+FFFD (what a UTF-8 encoder sends for them). */
const wellFormed = (text: string) => text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd")

/** RFC 5987 ext-value encoding: encodeURIComponent leaves `'`, `(`, `)` and `*`, which attr-char does not allow. */
const rfc5987 = (text: string) => encodeURIComponent(text).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

/** A multipart/form-data upload whose file name is sent as RFC 5987 `filename*` (any text) or a quoted `filename` (escaped). */
const multipart = (name: string, form: "ext" | "quoted", data: Buffer = TEXT) => {
  const boundary = `----fuzz-${randomBytes(8).toString("hex")}`
  const disposition =
    form === "ext"
      ? `form-data; name="file"; filename*=UTF-8''${rfc5987(wellFormed(name))}`
      : `form-data; name="file"; filename="${name.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`
  const head = `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--${boundary}\r\nContent-Disposition: ${disposition}\r\nContent-Type: text/plain\r\n\r\n`
  const body = Buffer.concat([Buffer.from(head, "utf8"), data, Buffer.from(`\r\n--${boundary}--\r\n`, "latin1")])
  return { contentType: `multipart/form-data; boundary=${boundary}`, body }
}

const uploadNamed = async (name: string, form: "ext" | "quoted"): Promise<Json> => {
  const m = multipart(name, form)
  const r = await rawCall(gw.port, "POST", "/v1/files", { headers: { ...openaiAuth, "content-type": m.contentType }, body: m.body })
  expect(r.status, `upload ${JSON.stringify(name)}: ${r.text.slice(0, 300)}`).toBe(200)
  return JSON.parse(r.text) as Json
}

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "gw-fuzz-paths-"))
  dataDir = path.join(root, "data")
  fs.mkdirSync(dataDir)
  canaryPath = path.join(root, "passwd")
  fs.writeFileSync(canaryPath, CANARY)
  geminiUp = await startFakeGeminiUpstream()
  gw = await startGateway(
    {
      keys: [{ key: KEY, app: "paths" }],
      providers: { mock: { type: "mock" }, gem: { type: "gemini", baseUrl: geminiUp.origin, apiKey: "k" } }
    },
    { dataDir }
  )
  const m = multipart("notes.txt", "quoted")
  const r = await rawCall(gw.port, "POST", "/v1/files", { headers: { ...openaiAuth, "content-type": m.contentType }, body: m.body })
  expect(r.status, r.text).toBe(200)
  fileId = (JSON.parse(r.text) as Json).id as string
  expect(fileId).toMatch(/^file-[0-9a-f]{32}$/)
})
afterAll(async () => {
  await gw?.close()
  await geminiUp?.close()
  if (root !== undefined) fs.rmSync(root, { recursive: true, force: true })
})

// -------------------------------------------------------------------------------------------------
// Envelopes
// -------------------------------------------------------------------------------------------------

type Family = "openai" | "messages" | "gemini"

const expectRefusal = (r: RawReply, family: Family, where: string, statuses: ReadonlyArray<number> = [400, 404]): Json => {
  const at = `${where} -> ${r.status} ${r.text.slice(0, 300)}`
  expect(statuses, at).toContain(r.status)
  expect(r.headers["content-type"], at).toMatch(/^application\/json/)
  const body = JSON.parse(r.text) as Json
  const e = body.error as Json
  if (family === "openai") {
    expect(Object.keys(body), at).toEqual(["error"])
    expect(Object.keys(e).sort(), at).toEqual(["code", "message", "param", "type"])
    expect(e.type, at).toBe("invalid_request_error")
  } else if (family === "messages") {
    expect(body.type, at).toBe("error")
    expect(Object.keys(e).sort(), at).toEqual(["message", "type"])
    expect(e.type, at).toBe(r.status === 404 ? "not_found_error" : "invalid_request_error")
  } else {
    expect(Object.keys(body), at).toEqual(["error"])
    expect(e.code, at).toBe(r.status)
    expect(e.status, at).toBe(r.status === 404 ? "NOT_FOUND" : "INVALID_ARGUMENT")
  }
  expect(r.text, at).not.toContain(CANARY)
  return body
}

// -------------------------------------------------------------------------------------------------
// Path traversal in file ids
// -------------------------------------------------------------------------------------------------

/** Traversal ids as they appear in the request target (already encoded where a target needs it). */
const TRAVERSALS = [
  "../../etc/passwd",
  "..%2f..%2fetc%2fpasswd",
  "..%2F..%2Fpasswd",
  "%2e%2e%2f%2e%2e%2fpasswd",
  "%2E%2E%2Fpasswd",
  "%252e%252e%252fpasswd",
  "..%5c..%5cpasswd",
  "..\\..\\passwd",
  "%2fetc%2fpasswd",
  "....%2f%2fpasswd",
  "%c0%ae%c0%ae%2fpasswd",
  "%00",
  "file-%00",
  "..",
  ".",
  "%2e",
  "passwd%00.txt",
  "..%2fdata%2fgateway.db",
  "..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd"
]

/** The live file's id with a traversal glued on: must not reach the file (or anything else). */
const aroundLive = () => [`${fileId}%2f..`, `${fileId}%2f..%2f..%2fpasswd`, `..%2f${fileId}`, `${fileId}%00`, `${fileId}%2500`, `files%2f${fileId}`, `${fileId}.`, `${fileId}%20`]

interface FilesRoute {
  readonly family: Family
  readonly method: string
  readonly target: (id: string) => string
  readonly headers: Readonly<Record<string, string>>
}

const FILES_ROUTES: ReadonlyArray<FilesRoute> = [
  { family: "openai", method: "GET", target: (id) => `/v1/files/${id}`, headers: openaiAuth },
  { family: "openai", method: "GET", target: (id) => `/v1/files/${id}/content`, headers: openaiAuth },
  { family: "openai", method: "DELETE", target: (id) => `/v1/files/${id}`, headers: openaiAuth },
  { family: "messages", method: "GET", target: (id) => `/v1/files/${id}`, headers: messagesAuth },
  { family: "messages", method: "GET", target: (id) => `/v1/files/${id}/content`, headers: messagesAuth },
  { family: "messages", method: "DELETE", target: (id) => `/v1/files/${id}`, headers: messagesAuth },
  { family: "gemini", method: "GET", target: (id) => `/v1beta/files/${id}`, headers: geminiAuth },
  { family: "gemini", method: "DELETE", target: (id) => `/v1beta/files/${id}`, headers: geminiAuth },
  { family: "gemini", method: "GET", target: (id) => `/v1beta/files/${id.replace(/^file-/, "")}`, headers: geminiAuth }
]

describe("path traversal in file ids, every Files route of the three shapes", () => {
  it("fixed traversal ids: 404/400 in the envelope; nothing outside or inside the data dir touched; the live file intact", async () => {
    const before = snapshot(root)
    for (const route of FILES_ROUTES) {
      for (const id of [...TRAVERSALS, ...aroundLive()]) {
        const target = route.target(id)
        const r = await rawCall(gw.port, route.method, target, { headers: route.headers })
        // a path with more segments than the route matches no route (404); a bad escape is 400
        expectRefusal(r, route.family, `${route.method} ${target} (${route.family})`, [400, 404, 405])
      }
    }
    expect(snapshot(root)).toEqual(before)
    expect(fs.readFileSync(canaryPath, "utf8")).toBe(CANARY)
    const content = await rawCall(gw.port, "GET", `/v1/files/${fileId}/content`, { headers: openaiAuth })
    expect(content.status).toBe(200)
    expect(content.text).toBe(TEXT.toString())
  })

  it("the not-found message names the id as sent and the spec's wording per shape", async () => {
    const id = "..%2f..%2fpasswd"
    const openai = await rawCall(gw.port, "GET", `/v1/files/${id}`, { headers: openaiAuth })
    expect(((expectRefusal(openai, "openai", "openai", [404]).error as Json).message as string)).toBe("No such File object: ../../passwd")
    const messages = await rawCall(gw.port, "GET", `/v1/files/${id}`, { headers: messagesAuth })
    expect((expectRefusal(messages, "messages", "messages", [404]).error as Json).message as string).toBe("File not found: ../../passwd")
    const gemini = await rawCall(gw.port, "GET", `/v1beta/files/${id}`, { headers: geminiAuth })
    expect((expectRefusal(gemini, "gemini", "gemini", [404]).error as Json).message as string).toMatch(/^File .* was not found$/)
  })

  it("generated traversal ids (fast-check): always 400/404/405 in the envelope, the tree below the temp root unchanged", async () => {
    const fragment = fc.constantFrom("..", ".", "%2e%2e", "%2E", "%2f", "%2F", "%5c", "\\", "%00", "%25", "%252f", "passwd", "etc", "data", "files", "file-", "gateway.db", "%c0%ae", "~", "%20", ":", "%3a", fileId)
    const before = snapshot(root)
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...FILES_ROUTES), fc.array(fragment, { minLength: 1, maxLength: 8 }), async (route, parts) => {
        const id = parts.join("")
        if (id === fileId || id === fileId.replace(/^file-/, "")) return
        const target = route.target(id)
        const r = await rawCall(gw.port, route.method, target, { headers: route.headers })
        expectRefusal(r, route.family, `${route.method} ${target} (${route.family})`, [400, 404, 405])
      }),
      { numRuns: 120 }
    )
    expect(snapshot(root)).toEqual(before)
    expect(fs.readFileSync(canaryPath, "utf8")).toBe(CANARY)
  })
})

// -------------------------------------------------------------------------------------------------
// Hostile file names
// -------------------------------------------------------------------------------------------------

/** RFC 5987 attr-char, and `%XX` escapes. */
const EXT_VALUE = /^[A-Za-z0-9!#$&+\-.^_`|~]*(?:%[0-9A-F]{2}[A-Za-z0-9!#$&+\-.^_`|~]*)*$/

/** The Content-Disposition of a download: attachment, a safe quoted ASCII name and an RFC 5987 name decoding to `name`. */
const expectDisposition = (r: RawReply, name: string, where: string) => {
  const at = `${where} -> ${r.status} ${JSON.stringify(r.headers)}`
  expect(r.status, at).toBe(200)
  const value = r.headers["content-disposition"]
  expect(typeof value, at).toBe("string")
  const match = /^attachment; filename="([^"\\]*)"; filename\*=UTF-8''(.*)$/.exec(value as string)
  expect(match, at).not.toBeNull()
  const [, plain, ext] = match!
  expect(plain, at).toMatch(/^[\x20-\x7e]*$/)
  expect(ext, at).toMatch(EXT_VALUE)
  expect(decodeURIComponent(ext), at).toBe(name)
  expect(value, at).not.toMatch(/[\r\n\u0000]/)
  // no header a name could have injected
  for (const header of Object.keys(r.headers)) expect(header, at).not.toMatch(/injected|set-cookie/i)
  expect(r.headers["x-content-type-options"], at).toBe("nosniff")
  expect(r.text, at).toBe(TEXT.toString())
}

const HOSTILE_NAMES = [
  "../../passwd",
  "..\\..\\windows\\system32\\config",
  "/etc/passwd",
  "a\r\nX-Injected: 1\r\n\r\n<html>",
  "a\nSet-Cookie: session=stolen",
  'quote".txt',
  'a"; filename="evil.exe',
  "back\\slash.txt",
  "it's (a) *star*.txt",
  "percent%2e%2e%2f.txt",
  "nul\u0000byte.txt",
  "tab\there.txt",
  "ünïcödé ✓ 文件 😀.txt",
  "\u202egnp.exe",
  ";,=.txt",
  "x".repeat(1000)
]

describe("hostile file names on upload and download", () => {
  it("each name is stored as given (or harmlessly), the file lands inside the data dir, and the download's Content-Disposition has no injection", async () => {
    for (const name of HOSTILE_NAMES) {
      for (const form of ["ext", "quoted"] as const) {
        // CR/LF/NUL cannot go in a quoted header value on the wire: those only as filename*
        if (form === "quoted" && /[\r\n\u0000]/.test(name)) continue
        const before = fs.readdirSync(root).sort()
        const file = await uploadNamed(name, form)
        const stored = file.filename as string
        expect(typeof stored).toBe("string")
        // the name as sent, or its last path segment (the multipart reader drops directories)
        expect(name.endsWith(stored), `stored name of ${JSON.stringify(name)}: ${JSON.stringify(stored)}`).toBe(true)
        if (stored !== name) expect(stored, `stored name of ${JSON.stringify(name)}`).not.toMatch(/[/\\]/)
        // nothing new beside the data dir: the name never became a path
        expect(fs.readdirSync(root).sort()).toEqual(before)
        for (const entry of snapshot(dataDir)) expect(entry, `a stored path holds the client's name: ${entry}`).not.toContain(stored.slice(0, 8))
        const where = `${form} ${JSON.stringify(name).slice(0, 80)}`
        const r = await rawCall(gw.port, "GET", `/v1/files/${file.id as string}/content`, { headers: openaiAuth })
        expectDisposition(r, stored, where)
        const messages = await rawCall(gw.port, "GET", `/v1/files/${file.id as string}/content`, { headers: messagesAuth })
        expectDisposition(messages, stored, `${where} (messages)`)
        const del = await rawCall(gw.port, "DELETE", `/v1/files/${file.id as string}`, { headers: openaiAuth })
        expect(del.status).toBe(200)
      }
    }
    expect(fs.readFileSync(canaryPath, "utf8")).toBe(CANARY)
  })

  it("generated names (fast-check, any unicode): the download's Content-Disposition decodes to the stored name and holds only safe bytes", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: "grapheme", minLength: 1, maxLength: 40 }), async (name) => {
        const file = await uploadNamed(name, "ext")
        const r = await rawCall(gw.port, "GET", `/v1/files/${file.id as string}/content`, { headers: openaiAuth })
        expectDisposition(r, file.filename as string, JSON.stringify(name))
        await rawCall(gw.port, "DELETE", `/v1/files/${file.id as string}`, { headers: openaiAuth })
      }),
      { numRuns: 25 }
    )
  })

  it("a Gemini displayName with CR/LF, quotes and a lone surrogate: the upload and both downloads answer cleanly", async () => {
    for (const displayName of ["a\r\nX-Injected: 1", 'q"uo\\te', "lone \ud800 surrogate", "../../passwd"]) {
      const boundary = `related-${randomBytes(6).toString("hex")}`
      const body = Buffer.concat([
        Buffer.from(`--${boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n${JSON.stringify({ file: { displayName } })}\r\n--${boundary}\r\nContent-Type: text/plain\r\n\r\n`, "utf8"),
        TEXT,
        Buffer.from(`\r\n--${boundary}--\r\n`, "latin1")
      ])
      const up = await rawCall(gw.port, "POST", "/upload/v1beta/files?uploadType=multipart", { headers: { ...geminiAuth, "content-type": `multipart/related; boundary=${boundary}` }, body })
      const where = JSON.stringify(displayName)
      expect(up.status, `${where}: ${up.text.slice(0, 300)}`).toBe(200)
      const file = (JSON.parse(up.text) as Json).file as Json
      const hex = (file.name as string).replace(/^files\//, "")
      const meta = await rawCall(gw.port, "GET", `/v1/files/file-${hex}`, { headers: openaiAuth })
      expect(meta.status, meta.text).toBe(200)
      const r = await rawCall(gw.port, "GET", `/v1/files/file-${hex}/content`, { headers: openaiAuth })
      expectDisposition(r, (JSON.parse(meta.text) as Json).filename as string, where)
      const g = await rawCall(gw.port, "GET", `/v1beta/files/${hex}`, { headers: geminiAuth })
      expect(g.status, g.text).toBe(200)
    }
    expect(fs.readdirSync(root).sort()).toEqual(["data", "passwd"])
  })
})

// -------------------------------------------------------------------------------------------------
// Gemini model paths
// -------------------------------------------------------------------------------------------------

const generate = (model: string, method = "generateContent") =>
  rawCall(gw.port, "POST", `/v1beta/models/${model}:${method}`, {
    headers: { ...geminiAuth, "content-type": "application/json" },
    body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hello" }] }] })
  })

describe("percent-encoding tricks in Gemini model paths", () => {
  it("encodings of the same model reach it: mock/echo, mock%2Fecho, models%2Fmock%2Fecho, mock%2fecho", async () => {
    for (const model of ["mock/echo", "mock%2Fecho", "mock%2fecho", "models%2Fmock%2Fecho", "models/mock/echo", "%6Dock%2F%65cho"]) {
      const r = await generate(model)
      expect(r.status, `${model}: ${r.text.slice(0, 300)}`).toBe(200)
      expect((JSON.parse(r.text) as Json).modelVersion, model).toBe("mock/echo")
    }
  })

  it("tricks are a clean 400/404 in the Gemini envelope, never decoded twice, never another route", async () => {
    const tricks = [
      "mock%252Fecho",
      "%252e%252e%252fgateway",
      "mock%2Fecho%00",
      "%00",
      "mock%00%2Fecho",
      "..",
      "..%2F..%2Fgateway%2Fadmin%2Fkeys",
      "../../gateway/admin/keys",
      "nope%2F..%2F..%2Fv1%2Fchat%2Fcompletions",
      "%",
      "%zz",
      "%c0%af",
      "%ed%a0%80",
      "x".repeat(6000),
      "models%2F",
      "%3AgenerateContent",
      "mock%2Fecho%3Fkey%3Dx%23",
      "unknown-provider%2Fm"
    ]
    for (const model of tricks) {
      const r = await generate(model)
      const where = `${model.slice(0, 80)}`
      if (r.status === 200) {
        // a model the mock provider answers: it must be the model as decoded once, never the double-decoded one
        const version = (JSON.parse(r.text) as Json).modelVersion as string
        expect(version, where).toBe(decodeURIComponent(model).replace(/^models\//, ""))
        expect(version, where).not.toBe("mock/echo")
        continue
      }
      // an empty model leaves only the GET model route: 405 naming the allowed methods
      expectRefusal(r, "gemini", where, [400, 404, 405])
      if (r.status === 405) expect(r.headers.allow, where).toMatch(/GET/)
    }
    const health = await rawCall(gw.port, "GET", "/healthz")
    expect(health.status).toBe(200)
  })

  it("generated model paths (fast-check): 200 for a mock model as decoded once, else 400/404 in the Gemini envelope", async () => {
    const piece = fc.oneof(
      fc.constantFrom("mock", "echo", "models", "gem", "..", ".", "%2F", "%2f", "%252F", "%00", "%25", "%3A", ":", "%23", "#", "?", "%3F", "%20", "/", "%2e%2e", "%c0%ae", "%ff", "~"),
      fc.string({ unit: "grapheme", maxLength: 6 }).map(encodeURIComponent)
    )
    await fc.assert(
      fc.asyncProperty(fc.array(piece, { minLength: 1, maxLength: 6 }), fc.constantFrom("generateContent", "countTokens", "streamGenerateContent?alt=sse"), async (pieces, method) => {
        const model = pieces.join("")
        // `#` and `?` end the path on the wire: what follows is not the model
        if (/[#?]/.test(model)) return
        const r = await generate(model, method)
        const where = `${model}:${method} -> ${r.status} ${r.text.slice(0, 200)}`
        expect(r.status, where).not.toBe(500)
        if (r.status === 200) return
        expectRefusal(r, "gemini", where, [400, 404, 405])
      }),
      { numRuns: 80 }
    )
  })

  it("a model name of dot segments cannot move the upstream request off /v1beta/models/", async () => {
    geminiUp.reset()
    for (const model of ["gem%2F..%2F..%2Fv1%2Ffiles", "gem%2F..%2Fx", "gem%2F.%2F..%2F..%2Fupload", "gem%2F%2e%2e%2F%2e%2e%2Fadmin", "gem%2Fa%2F..%2F..%2F..%2Fb"]) {
      const r = await generate(model)
      const where = `${model} -> ${r.status} ${r.text.slice(0, 200)}`
      expect(r.status, where).not.toBe(500)
      if (r.status >= 400) expectRefusal(r, "gemini", where, [400, 404])
    }
    for (const request of geminiUp.requests) expect(request.path, `upstream saw ${request.path}`).toMatch(/^\/v1beta\/models\/[^/]/)
    for (const request of geminiUp.requests) expect(request.path, `upstream saw ${request.path}`).not.toMatch(/(^|\/)\.\.?(\/|:|$)/)
  })
})
