import { randomBytes, type Hash } from "node:crypto"
import { createRequire, syncBuiltinESMExports } from "node:module"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import type { RawReply } from "../support/RawHttp.js"
import { call, expectProblem, parse, pollUntil, type Json } from "../gateway/helpers.js"
import { formBody, pngBytes, relatedBody, textBytes } from "../files/uploadWire.js"

/**
 * Isolation and authentication (issue 9): every route that holds per-app state (stored responses,
 * input items, item references, the three Files shapes, file references in model requests,
 * resumable upload URLs, usage), called by a second app and with a revoked runtime key, answers
 * exactly as for an id that never existed (status, headers and bytes, modulo the id itself), and
 * changes nothing; Host checks (DNS rebinding) and Origin checks (keyless gateways) on every
 * family, without side effects; keys are hashed before any comparison (no length or prefix leak).
 */

const ADMIN = "admin-isolation-0123456789"
const BETA = "sk-beta-isolation-0123456789"
const MODEL = "up/m"
const AV = { "anthropic-version": "2023-06-01" } as const
const JSON_TYPE = { "content-type": "application/json" } as const

type Family = "openai" | "messages" | "gemini" | "gateway"

interface Req {
  readonly method: string
  readonly target: string
  readonly headers: Readonly<Record<string, string>>
  readonly body?: string | Buffer
}

/** How each family presents a key (the spellings its SDKs use). */
const keyHeaders = (family: Family, key: string): Record<string, string> =>
  family === "messages" ? { "x-api-key": key, ...AV } : family === "gemini" ? { "x-goog-api-key": key } : { authorization: `Bearer ${key}` }

const send = (gw: TestGateway, req: Req): Promise<RawReply> => call(gw, req.method, req.target, { headers: req.headers, ...(req.body !== undefined ? { body: req.body } : {}) })

const hex = (n: number) => randomBytes(Math.ceil(n / 2)).toString("hex").slice(0, n)

/** An id of the same shape (prefix and length) that never existed. */
const ghostOf = (id: string): string => id.replace(/[0-9a-f]{16,}$/, (m) => hex(m.length))

/** The spellings of an id that may appear in an answer: `file-<hex>` also as `<hex>` (Gemini names). */
const spellings = (id: string): Array<string> => (id.startsWith("file-") ? [id, id.slice(5)] : [id])

const VOLATILE_HEADERS = new Set(["date", "x-gateway-request-id", "request-id"])

/** An answer with the given ids and every request id masked: what must be identical between two calls. */
const normalized = (r: RawReply, ids: ReadonlyArray<string>) => {
  const mask = (text: string) => {
    let out = text
    for (const id of ids) for (const s of spellings(id)) out = out.split(s).join("<ID>")
    return out.replace(/req_[0-9a-f]{24}/g, "<REQ>")
  }
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(r.headers)) {
    if (VOLATILE_HEADERS.has(name)) continue
    headers[name] = mask(Array.isArray(value) ? value.join(", ") : String(value))
  }
  return { status: r.status, headers, body: mask(r.text) }
}

/** A request built for an id and a key. */
interface Probe {
  readonly name: string
  readonly family: Family
  readonly build: (id: string, key: string) => Req
}

const get = (family: Family, target: string, extra: Record<string, string> = {}): Probe["build"] => (_id, key) => ({ method: "GET", target, headers: { ...keyHeaders(family, key), ...extra } })

const probe = (name: string, family: Family, build: (id: string) => { method: string; target: string; body?: unknown; headers?: Record<string, string> }): Probe => ({
  name,
  family,
  build: (id, key) => {
    const b = build(id)
    const body = b.body === undefined ? undefined : typeof b.body === "string" || Buffer.isBuffer(b.body) ? b.body : JSON.stringify(b.body)
    return {
      method: b.method,
      target: b.target,
      headers: { ...keyHeaders(family, key), ...(b.body !== undefined && b.headers?.["content-type"] === undefined ? JSON_TYPE : {}), ...b.headers },
      ...(body !== undefined ? { body } : {})
    }
  }
})

const messagesBody = (content: unknown) => ({ model: MODEL, max_tokens: 32, messages: [{ role: "user", content }] })
const geminiBody = (fileUri: string) => ({ contents: [{ role: "user", parts: [{ text: "look" }, { fileData: { fileUri } }] }] })

// ---------------------------------------------------------------------------------------------
// One gateway, two apps: `alpha` on runtime keys (one live, one revoked), `beta` on a config key
// ---------------------------------------------------------------------------------------------

let upstream: FakeUpstream
let gw: TestGateway

/** alpha's live runtime key and the one revoked after use */
let alphaKey: string
let alphaKeyId: string
let revokedKey: string

/** alpha's state */
const A = {
  response: "",
  /** an output item of `response` (item_reference) */
  outputItem: "",
  /** an input item of `response` (input_items `after`) */
  inputItem: "",
  /** a PNG uploaded chat-style */
  image: "",
  imageBytes: Buffer.alloc(0) as Buffer,
  /** a text file uploaded Messages-style */
  text: "",
  textBytes: Buffer.alloc(0) as Buffer,
  /** a PNG uploaded Gemini multipart-style (its id `file-<hex>`) */
  gemini: "",
  /** an unfinished resumable upload and the bytes sent so far */
  upload: "",
  uploadBytes: Buffer.alloc(0) as Buffer,
  /** an unfinished upload started with the key that is then revoked */
  revokedUpload: ""
}
/** beta's own response (its input_items page is probed with alpha's item ids) */
let betaResponse = ""

const uploadChat = async (key: string, data: Buffer, type: string, filename: string): Promise<string> => {
  const form = formBody({ data, filename, type })
  const r = await call(gw, "POST", "/v1/files", { headers: { authorization: `Bearer ${key}`, "content-type": form.contentType }, body: form.body })
  expect(r.status, r.text).toBe(200)
  return parse(r).id as string
}

const startUpload = async (key: string): Promise<string> => {
  const r = await call(gw, "POST", "/upload/v1beta/files", {
    headers: { "x-goog-api-key": key, ...JSON_TYPE, "x-goog-upload-protocol": "resumable", "x-goog-upload-command": "start", "x-goog-upload-header-content-type": "text/plain" },
    body: JSON.stringify({ file: { displayName: "notes.txt" } })
  })
  expect(r.status, r.text).toBe(200)
  const url = String(r.headers["x-goog-upload-url"])
  const id = new URL(url).searchParams.get("upload_id")
  expect(id).toMatch(/^[0-9a-f]{32}$/)
  return id as string
}

/** A chunk to an upload URL: `upload` at `offset`, with a key (or none). */
const chunk = (id: string, headers: Record<string, string>, data: Buffer, command = "upload", offset?: number): Req => ({
  method: "POST",
  target: `/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable`,
  headers: { ...headers, "content-type": "application/octet-stream", "x-goog-upload-command": command, ...(offset !== undefined ? { "x-goog-upload-offset": String(offset) } : {}) },
  body: data
})

const sizeReceived = async (id: string, key: string): Promise<number> => {
  const r = await send(gw, chunk(id, { "x-goog-api-key": key }, Buffer.alloc(0), "query"))
  expect(r.status, r.text).toBe(200)
  return Number(r.headers["x-goog-upload-size-received"])
}

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gw = await startGateway({
    providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
    adminKey: ADMIN,
    keys: [{ key: BETA, app: "beta" }],
    limits: { maxBodyBytes: 4 * 1024 * 1024 }
  })
  const admin = { authorization: `Bearer ${ADMIN}`, ...JSON_TYPE }
  const made = async () => {
    const r = await call(gw, "POST", "/gateway/admin/keys", { headers: admin, body: JSON.stringify({ app: "alpha" }) })
    expect(r.status, r.text).toBe(201)
    return parse(r) as { id: string; key: string }
  }
  const live = await made()
  const doomed = await made()
  alphaKey = live.key
  alphaKeyId = live.id
  revokedKey = doomed.key

  // alpha's stored response, its items, and usage under a user name
  const resp = await call(gw, "POST", "/v1/responses", {
    headers: { authorization: `Bearer ${alphaKey}`, ...JSON_TYPE },
    body: JSON.stringify({ model: MODEL, input: "remember the alpha secret", user: "alice-isolation" })
  })
  expect(resp.status, resp.text).toBe(200)
  const body = parse(resp)
  A.response = body.id as string
  A.outputItem = ((body.output as Array<Json>)[0]).id as string
  expect(A.outputItem).toMatch(/^msg_[0-9a-f]{32}$/)
  const items = await call(gw, "GET", `/v1/responses/${A.response}/input_items`, { headers: { authorization: `Bearer ${alphaKey}` } })
  expect(items.status, items.text).toBe(200)
  A.inputItem = ((parse(items).data as Array<Json>)[0]).id as string
  expect(A.inputItem).toMatch(/^msg_[0-9a-f]{32}$/)

  // files in the three shapes
  A.imageBytes = pngBytes(300)
  A.image = await uploadChat(alphaKey, A.imageBytes, "image/png", "alpha.png")
  A.textBytes = textBytes(200)
  const form = formBody({ data: A.textBytes, filename: "alpha.txt", type: "text/plain" }, {})
  const m = await call(gw, "POST", "/v1/files", { headers: { "x-api-key": alphaKey, ...AV, "content-type": form.contentType }, body: form.body })
  expect(m.status, m.text).toBe(200)
  A.text = parse(m).id as string
  const related = relatedBody({ file: { displayName: "alpha-gem.png" } }, pngBytes(200))
  const g = await call(gw, "POST", "/upload/v1beta/files?uploadType=multipart", { headers: { "x-goog-api-key": alphaKey, "content-type": related.contentType }, body: related.body })
  expect(g.status, g.text).toBe(200)
  A.gemini = `file-${String(((parse(g).file as Json).name as string).slice("files/".length))}`

  // an unfinished resumable upload with a first chunk in it
  A.upload = await startUpload(alphaKey)
  A.uploadBytes = Buffer.from("alpha first chunk; ")
  const first = await send(gw, chunk(A.upload, { "x-goog-api-key": alphaKey }, A.uploadBytes, "upload", 0))
  expect(first.status, first.text).toBe(200)

  // the doomed key works, starts an upload, then is revoked
  const before = await call(gw, "GET", "/v1/files", { headers: { authorization: `Bearer ${revokedKey}` } })
  expect(before.status, before.text).toBe(200)
  A.revokedUpload = await startUpload(revokedKey)
  const revoked = await call(gw, "DELETE", `/gateway/admin/keys/${doomed.id}`, { headers: { authorization: `Bearer ${ADMIN}` } })
  expect(revoked.status, revoked.text).toBe(200)

  // beta's own state: a response and a file, so its listings are not trivially empty
  const own = await call(gw, "POST", "/v1/responses", { headers: { authorization: `Bearer ${BETA}`, ...JSON_TYPE }, body: JSON.stringify({ model: MODEL, input: "beta here" }) })
  expect(own.status, own.text).toBe(200)
  betaResponse = parse(own).id as string
  await uploadChat(BETA, pngBytes(100), "image/png", "beta.png")
}, 30_000)

afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

/** Every route that reads or changes a per-app resource, per resource (the id alpha holds). */
const resources = (): Array<{ readonly resource: string; readonly id: () => string; readonly probes: ReadonlyArray<Probe> }> => [
  {
    resource: "stored response",
    id: () => A.response,
    probes: [
      probe("GET /v1/responses/{id}", "openai", (id) => ({ method: "GET", target: `/v1/responses/${id}` })),
      probe("HEAD /v1/responses/{id}", "openai", (id) => ({ method: "HEAD", target: `/v1/responses/${id}` })),
      probe("GET /v1/responses/{id}/input_items", "openai", (id) => ({ method: "GET", target: `/v1/responses/${id}/input_items?limit=5&order=asc` })),
      probe("POST /v1/responses/{id}/cancel (not served)", "openai", (id) => ({ method: "POST", target: `/v1/responses/${id}/cancel`, body: {} })),
      probe("DELETE /v1/responses/{id}", "openai", (id) => ({ method: "DELETE", target: `/v1/responses/${id}` })),
      probe("POST /v1/responses previous_response_id", "openai", (id) => ({ method: "POST", target: "/v1/responses", body: { model: MODEL, input: "continue", previous_response_id: id } })),
      probe("POST /v1/responses previous_response_id (stream)", "openai", (id) => ({
        method: "POST",
        target: "/v1/responses",
        body: { model: MODEL, input: "continue", previous_response_id: id, stream: true }
      }))
    ]
  },
  {
    resource: "output item (item_reference)",
    id: () => A.outputItem,
    probes: [
      probe("POST /v1/responses item_reference", "openai", (id) => ({ method: "POST", target: "/v1/responses", body: { model: MODEL, input: [{ type: "item_reference", id }, { role: "user", content: "and?" }] } }))
    ]
  },
  {
    resource: "input item (input_items after)",
    id: () => A.inputItem,
    probes: [probe("GET /v1/responses/{own}/input_items?after={id}", "openai", (id) => ({ method: "GET", target: `/v1/responses/${betaResponse}/input_items?after=${id}` }))]
  },
  {
    resource: "file (image)",
    id: () => A.image,
    probes: [
      probe("GET /v1/files/{id}", "openai", (id) => ({ method: "GET", target: `/v1/files/${id}` })),
      probe("GET /v1/files/{id}/content", "openai", (id) => ({ method: "GET", target: `/v1/files/${id}/content` })),
      probe("HEAD /v1/files/{id}/content", "openai", (id) => ({ method: "HEAD", target: `/v1/files/${id}/content` })),
      probe("DELETE /v1/files/{id}", "openai", (id) => ({ method: "DELETE", target: `/v1/files/${id}` })),
      probe("GET /v1/files?after={id}", "openai", (id) => ({ method: "GET", target: `/v1/files?after=${id}` })),
      probe("GET /v1/files/{id} (Messages)", "messages", (id) => ({ method: "GET", target: `/v1/files/${id}` })),
      probe("GET /v1/files/{id}/content (Messages)", "messages", (id) => ({ method: "GET", target: `/v1/files/${id}/content` })),
      probe("DELETE /v1/files/{id} (Messages)", "messages", (id) => ({ method: "DELETE", target: `/v1/files/${id}?beta=true` })),
      probe("GET /v1/files?after_id={id} (Messages)", "messages", (id) => ({ method: "GET", target: `/v1/files?after_id=${id}` })),
      probe("GET /v1/files?before_id={id} (Messages)", "messages", (id) => ({ method: "GET", target: `/v1/files?before_id=${id}` })),
      probe("GET /v1/files?page={id} (Messages)", "messages", (id) => ({ method: "GET", target: `/v1/files?page=${id}` })),
      probe("GET /v1/files?ids={id} (Messages)", "messages", (id) => ({ method: "GET", target: `/v1/files?ids=${id}` })),
      probe("POST /v1/chat/completions file part", "openai", (id) => ({
        method: "POST",
        target: "/v1/chat/completions",
        body: { model: MODEL, messages: [{ role: "user", content: [{ type: "text", text: "see" }, { type: "file", file: { file_id: id } }] }] }
      })),
      probe("POST /v1/responses input_image", "openai", (id) => ({
        method: "POST",
        target: "/v1/responses",
        body: { model: MODEL, input: [{ role: "user", content: [{ type: "input_image", file_id: id, detail: "auto" }] }] }
      })),
      probe("POST /v1/messages image file source", "messages", (id) => ({
        method: "POST",
        target: "/v1/messages",
        body: messagesBody([{ type: "image", source: { type: "file", file_id: id } }, { type: "text", text: "see" }])
      }))
    ]
  },
  {
    resource: "file (text)",
    id: () => A.text,
    probes: [
      probe("POST /v1/responses input_file", "openai", (id) => ({ method: "POST", target: "/v1/responses", body: { model: MODEL, input: [{ role: "user", content: [{ type: "input_file", file_id: id }] }] } })),
      probe("POST /v1/messages document file source", "messages", (id) => ({
        method: "POST",
        target: "/v1/messages",
        body: messagesBody([{ type: "document", source: { type: "file", file_id: id } }, { type: "text", text: "read" }])
      })),
      probe("GET /v1/files/{id}/content (text)", "openai", (id) => ({ method: "GET", target: `/v1/files/${id}/content` }))
    ]
  },
  {
    resource: "file (Gemini upload)",
    id: () => A.gemini,
    probes: [
      probe("GET /v1beta/files/{name}", "gemini", (id) => ({ method: "GET", target: `/v1beta/files/${id.slice(5)}` })),
      probe("DELETE /v1beta/files/{name}", "gemini", (id) => ({ method: "DELETE", target: `/v1beta/files/${id.slice(5)}` })),
      probe("GET /v1beta/files?pageToken={name}", "gemini", (id) => ({ method: "GET", target: `/v1beta/files?pageToken=${id.slice(5)}` })),
      probe("generateContent fileData files/{name}", "gemini", (id) => ({ method: "POST", target: `/v1beta/models/${MODEL}:generateContent`, body: geminiBody(`files/${id.slice(5)}`) })),
      probe("generateContent fileData {uri}", "gemini", (id) => ({
        method: "POST",
        target: `/v1beta/models/${MODEL}:generateContent`,
        body: geminiBody(`${gw.url}/v1beta/files/${id.slice(5)}`)
      })),
      probe("streamGenerateContent fileData files/{name}", "gemini", (id) => ({
        method: "POST",
        target: `/v1beta/models/${MODEL}:streamGenerateContent?alt=sse`,
        body: geminiBody(`files/${id.slice(5)}`)
      })),
      probe("GET /v1/files/{id} (chat shape of a Gemini upload)", "openai", (id) => ({ method: "GET", target: `/v1/files/${id}` }))
    ]
  },
  {
    resource: "resumable upload URL",
    id: () => A.upload,
    probes: [
      { name: "chunk upload", family: "gemini", build: (id, key) => chunk(id, { "x-goog-api-key": key }, Buffer.from("beta was here"), "upload", A.uploadBytes.length) },
      { name: "chunk upload, finalize", family: "gemini", build: (id, key) => chunk(id, { "x-goog-api-key": key }, Buffer.from("beta was here"), "upload, finalize", A.uploadBytes.length) },
      { name: "chunk query", family: "gemini", build: (id, key) => chunk(id, { "x-goog-api-key": key }, Buffer.alloc(0), "query") },
      { name: "chunk upload, key in ?key=", family: "gemini", build: (id, key) => ({ ...chunk(id, {}, Buffer.from("beta"), "upload", A.uploadBytes.length), target: `/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable&key=${key}` }) }
    ]
  }
]

/** Own routes a revoked key is refused on (the per-app one among them: usage). */
const ownRoutes: ReadonlyArray<Probe> = [
  { name: "GET /gateway/usage", family: "gateway", build: get("gateway", "/gateway/usage") },
  { name: "GET /gateway/usage?app=alpha", family: "gateway", build: get("gateway", "/gateway/usage?app=alpha") },
  { name: "GET /gateway/metrics", family: "gateway", build: get("gateway", "/gateway/metrics") },
  { name: "GET /gateway/status", family: "gateway", build: get("gateway", "/gateway/status") },
  { name: "GET /gateway/admin/keys", family: "gateway", build: get("gateway", "/gateway/admin/keys") }
]

/** alpha still holds everything, unchanged. */
const expectAlphaIntact = async () => {
  const bearerA = { authorization: `Bearer ${alphaKey}` }
  const resp = await call(gw, "GET", `/v1/responses/${A.response}`, { headers: bearerA })
  expect(resp.status, resp.text).toBe(200)
  expect(parse(resp).id).toBe(A.response)
  const items = await call(gw, "GET", `/v1/responses/${A.response}/input_items`, { headers: bearerA })
  expect(items.status, items.text).toBe(200)
  expect(((parse(items).data as Array<Json>)[0]).id).toBe(A.inputItem)
  const img = await call(gw, "GET", `/v1/files/${A.image}/content`, { headers: bearerA })
  expect(img.status).toBe(200)
  const raw = await new Promise<Buffer>((resolve, reject) => {
    // the bytes, not their UTF-8 reading
    import("node:http").then((http) => {
      const req = http.request({ host: "127.0.0.1", port: gw.port, path: `/v1/files/${A.image}/content`, headers: bearerA, agent: false }, (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () => resolve(Buffer.concat(chunks)))
        res.on("error", reject)
      })
      req.on("error", reject)
      req.end()
    }, reject)
  })
  expect(raw.equals(A.imageBytes)).toBe(true)
  const txt = await call(gw, "GET", `/v1/files/${A.text}/content`, { headers: { "x-api-key": alphaKey, ...AV } })
  expect(txt.status).toBe(200)
  expect(txt.text).toBe(A.textBytes.toString("utf8"))
  const gem = await call(gw, "GET", `/v1beta/files/${A.gemini.slice(5)}`, { headers: { "x-goog-api-key": alphaKey } })
  expect(gem.status, gem.text).toBe(200)
  expect(await sizeReceived(A.upload, alphaKey)).toBe(A.uploadBytes.length)
  // the output item is still referencable by its owner (not a request that could never succeed)
  const ref = await call(gw, "POST", "/v1/responses", {
    headers: { ...bearerA, ...JSON_TYPE },
    body: JSON.stringify({ model: MODEL, input: [{ type: "item_reference", id: A.outputItem }, { role: "user", content: "and?" }], store: false })
  })
  expect(ref.status, ref.text).toBe(200)
}

describe("another app's ids behave exactly like ids that never existed", () => {
  it("alpha (the owner) reaches every resource through every probe", async () => {
    for (const { resource, id, probes } of resources()) {
      for (const p of probes) {
        // destructive probes and the probe of beta's own response are checked elsewhere
        if (p.build("x", "k").method === "DELETE" || p.name.includes("{own}") || p.name.startsWith("chunk") || p.name.includes("(not served)")) continue
        const r = await send(gw, p.build(id(), alphaKey))
        expect(r.status, `${resource} / ${p.name}: ${r.text.slice(0, 300)}`).toBe(200)
      }
    }
    await expectAlphaIntact()
  })

  it("beta gets the never-existed answer, byte for byte, on every route; nothing reaches the upstream; nothing changes", async () => {
    const upstreamBefore = upstream.requests.length
    let compared = 0
    for (const { resource, id, probes } of resources()) {
      for (const p of probes) {
        const foreign = id()
        const ghost = ghostOf(foreign)
        expect(ghost.length).toBe(foreign.length)
        const asForeign = await send(gw, p.build(foreign, BETA))
        const asGhost = await send(gw, p.build(ghost, BETA))
        const where = `${resource} / ${p.name}`
        expect(normalized(asForeign, [foreign]), where).toEqual(normalized(asGhost, [ghost]))
        // and it is a refusal, or (ids filter) an answer that holds none of alpha's files
        if (asForeign.status === 200) {
          expect(where).toMatch(/ids=/)
          expect(parse(asForeign).data, where).toEqual([])
        } else expect(asForeign.status, where).toBeGreaterThanOrEqual(400)
        compared++
      }
    }
    expect(compared).toBeGreaterThanOrEqual(30)
    expect(upstream.requests.length, "a refused cross-app reference reached the upstream").toBe(upstreamBefore)
    await expectAlphaIntact()
  })

  it("the refusals are the family's not-found, naming the id beta sent", async () => {
    const b = { authorization: `Bearer ${BETA}` }
    const r1 = await call(gw, "GET", `/v1/responses/${A.response}`, { headers: b })
    expect(r1.status).toBe(404)
    expect(((parse(r1).error as Json).message as string)).toContain(A.response)
    const r2 = await call(gw, "POST", "/v1/responses", { headers: { ...b, ...JSON_TYPE }, body: JSON.stringify({ model: MODEL, input: "x", previous_response_id: A.response }) })
    expect(r2.status).toBe(400)
    expect(parse(r2).error).toMatchObject({ code: "previous_response_not_found", param: "previous_response_id" })
    const r3 = await call(gw, "POST", "/v1/responses", { headers: { ...b, ...JSON_TYPE }, body: JSON.stringify({ model: MODEL, input: [{ type: "item_reference", id: A.outputItem }] }) })
    expect(r3.status).toBe(400)
    expect((parse(r3).error as Json).code).toBe("item_not_found")
    const r4 = await call(gw, "GET", `/v1/files/${A.image}`, { headers: b })
    expect(r4.status).toBe(404)
    expect(parse(r4).error).toMatchObject({ type: "invalid_request_error", message: `No such File object: ${A.image}` })
    const r5 = await call(gw, "GET", `/v1/files/${A.image}`, { headers: { "x-api-key": BETA, ...AV } })
    expect(r5.status).toBe(404)
    expect(parse(r5)).toMatchObject({ type: "error", error: { type: "not_found_error", message: `File not found: ${A.image}` } })
    const r6 = await call(gw, "GET", `/v1beta/files/${A.gemini.slice(5)}`, { headers: { "x-goog-api-key": BETA } })
    expect(r6.status).toBe(404)
    expect(parse(r6).error).toMatchObject({ code: 404, status: "NOT_FOUND", message: `File files/${A.gemini.slice(5)} was not found` })
    const r7 = await send(gw, chunk(A.upload, { "x-goog-api-key": BETA }, Buffer.from("x"), "upload", A.uploadBytes.length))
    expect(r7.status).toBe(404)
    expect((parse(r7).error as Json).status).toBe("NOT_FOUND")
  })

  it("beta's listings hold only beta's files, in every shape", async () => {
    const chat = await call(gw, "GET", "/v1/files", { headers: { authorization: `Bearer ${BETA}` } })
    const messages = await call(gw, "GET", "/v1/files", { headers: { "x-api-key": BETA, ...AV } })
    const gem = await call(gw, "GET", "/v1beta/files", { headers: { "x-goog-api-key": BETA } })
    for (const r of [chat, messages, gem]) {
      expect(r.status, r.text).toBe(200)
      for (const id of [A.image, A.text, A.gemini]) expect(r.text).not.toContain(id.slice(5))
    }
    expect((parse(chat).data as Array<Json>).map((f) => f.filename)).toEqual(["beta.png"])
    expect((parse(messages).data as Array<Json>).map((f) => f.filename)).toEqual(["beta.png"])
    expect((parse(gem).files as Array<Json>).map((f) => f.displayName)).toEqual(["beta.png"])
  })

  it("usage: beta reads only its own; alpha's app is app_forbidden (spec 5.4), alpha's user shows nothing to beta", async () => {
    // the admin sees alpha's usage under the user alpha's request named
    const admin = await pollUntil(
      () => call(gw, "GET", "/gateway/usage?app=alpha&user=alice-isolation", { headers: { authorization: `Bearer ${ADMIN}` } }),
      (r) => r.status === 200 && ((parse(r).totals as Json).requests as number) >= 1
    )
    expect(admin.status, admin.text).toBe(200)
    expect(((parse(admin).totals as Json).requests as number)).toBeGreaterThanOrEqual(1)
    // beta asking for alpha's app: refused, and the refusal carries none of alpha's numbers
    const forbidden = await call(gw, "GET", "/gateway/usage?app=alpha", { headers: { authorization: `Bearer ${BETA}` } })
    expectProblem(forbidden, 403, "app_forbidden", { instance: "/gateway/usage?app=alpha", param: "app", secrets: [alphaKey, BETA] })
    // (the spec tells the two apart here: a name that is no app of the gateway is invalid_app, not app_forbidden)
    const unknown = await call(gw, "GET", "/gateway/usage?app=nobody-here", { headers: { authorization: `Bearer ${BETA}` } })
    expectProblem(unknown, 400, "invalid_app", { instance: "/gateway/usage?app=nobody-here", param: "app" })
    // beta filtering on alpha's user name: its own (empty) report for that user
    const byUser = await call(gw, "GET", "/gateway/usage?user=alice-isolation", { headers: { authorization: `Bearer ${BETA}` } })
    expect(byUser.status, byUser.text).toBe(200)
    expect(parse(byUser).app).toBe("beta")
    expect((parse(byUser).totals as Json).requests).toBe(0)
    // beta's own report does not count alpha's requests
    const own = await call(gw, "GET", "/gateway/usage", { headers: { authorization: `Bearer ${BETA}` } })
    expect(own.status, own.text).toBe(200)
    expect(parse(own).app).toBe("beta")
    expect(own.text).not.toContain("alice-isolation")
  })
})

describe("a revoked runtime key is refused everywhere, exactly like a key that never existed", () => {
  const neverKey = () => `sk-gw-${hex(48)}`

  it("401 in the family's envelope on every probe and own route, identical to a never-issued key of the same shape", async () => {
    expect(revokedKey).toMatch(/^sk-gw-[0-9a-f]{48}$/)
    const upstreamBefore = upstream.requests.length
    const all = [...resources().flatMap((r) => r.probes.map((p) => ({ p, id: r.id() }))), ...ownRoutes.map((p) => ({ p, id: "" }))]
    for (const { p, id } of all) {
      const never = neverKey()
      const asRevoked = await send(gw, p.build(id, revokedKey))
      const asNever = await send(gw, p.build(id, never))
      const where = `${p.name}: ${asRevoked.text.slice(0, 300)}`
      expect(asRevoked.status, where).toBe(401)
      expect(normalized(asRevoked, [revokedKey]), where).toEqual(normalized(asNever, [never]))
      if (p.build(id, revokedKey).method === "HEAD") continue
      const body = parse(asRevoked)
      if (p.family === "openai") expect((body.error as Json).code, where).toBe("invalid_api_key")
      if (p.family === "messages") expect(body, where).toMatchObject({ type: "error", error: { type: "authentication_error" } })
      if (p.family === "gemini") expect(body.error, where).toMatchObject({ code: 401, status: "UNAUTHENTICATED" })
      if (p.family === "gateway") expectProblem(asRevoked, 401, "invalid_api_key", { instance: p.build(id, revokedKey).target, secrets: [revokedKey] })
      expect(asRevoked.text).not.toContain(revokedKey)
    }
    // the other spellings: Bearer on Messages, ?key= and x-genai-api-key on Gemini
    const spelled: Array<[Req, (r: RawReply) => void]> = [
      [{ method: "GET", target: "/v1/files", headers: { authorization: `Bearer ${revokedKey}`, ...AV } }, (r) => expect(parse(r).error).toMatchObject({ type: "authentication_error" })],
      [{ method: "GET", target: `/v1beta/files?key=${revokedKey}`, headers: {} }, (r) => expect(parse(r).error).toMatchObject({ status: "UNAUTHENTICATED" })],
      [{ method: "GET", target: "/v1beta/files", headers: { "x-genai-api-key": revokedKey } }, (r) => expect(parse(r).error).toMatchObject({ status: "UNAUTHENTICATED" })],
      [{ method: "GET", target: "/v1beta/models", headers: { authorization: `Bearer ${revokedKey}` } }, (r) => expect(parse(r).error).toMatchObject({ status: "UNAUTHENTICATED" })]
    ]
    for (const [req, check] of spelled) {
      const r = await send(gw, req)
      expect(r.status, `${req.target}: ${r.text}`).toBe(401)
      check(r)
    }
    expect(upstream.requests.length).toBe(upstreamBefore)
    await expectAlphaIntact()
  })

  it("an upload started with the revoked key is gone: its URL answers as one that never existed, with no key and with alpha's live key", async () => {
    const ghost = ghostOf(A.revokedUpload)
    const data = Buffer.from("late bytes")
    const withoutKey: Record<string, string> = {}
    for (const headers of [withoutKey, { "x-goog-api-key": alphaKey }]) {
      const dropped = await send(gw, chunk(A.revokedUpload, headers, data, "upload", 0))
      const never = await send(gw, chunk(ghost, headers, data, "upload", 0))
      expect(dropped.status, dropped.text).toBe(Object.keys(headers).length === 0 ? 401 : 404)
      expect(normalized(dropped, [A.revokedUpload])).toEqual(normalized(never, [ghost]))
    }
    // alpha's upload started with the live key still takes key-less chunks (its URL is the credential)
    expect(await sizeReceived(A.upload, alphaKey)).toBe(A.uploadBytes.length)
  })

  it("alpha's live key still works after its sibling was revoked", async () => {
    const r = await call(gw, "GET", "/v1/files", { headers: { authorization: `Bearer ${alphaKey}` } })
    expect(r.status, r.text).toBe(200)
    const names = (parse(r).data as Array<Json>).map((f) => f.id)
    expect(names).toEqual(expect.arrayContaining([A.image, A.text, A.gemini]))
  })
})

// ---------------------------------------------------------------------------------------------
// Host: DNS rebinding, on every family, before the key and without side effects
// ---------------------------------------------------------------------------------------------

const expectInvalidHost = (family: Family, r: RawReply, target: string) => {
  const where = `${family} ${target}: ${r.status} ${r.text.slice(0, 300)}`
  expect(r.status, where).toBe(400)
  const body = parse(r)
  if (family === "openai") expect(body.error, where).toMatchObject({ type: "invalid_request_error", code: "invalid_host" })
  if (family === "messages") expect(body, where).toEqual({ type: "error", error: { type: "invalid_request_error", message: expect.any(String) } })
  if (family === "gemini") expect(body.error, where).toMatchObject({ code: 400, status: "INVALID_ARGUMENT" })
  if (family === "gateway") expectProblem(r, 400, "invalid_host", { instance: target })
}

describe("Host check (DNS rebinding) on every family", () => {
  const wrongHosts = () => ["evil.example", `evil.example:${gw.port}`, `127.0.0.1:${gw.port === 65535 ? 1 : gw.port + 1}`, "localhost", `attacker.localhost:${gw.port}`]

  it("a wrong Host is refused with a valid key on every family, and the request changes nothing", async () => {
    const upstreamBefore = upstream.requests.length
    const keysBefore = await call(gw, "GET", "/gateway/admin/keys", { headers: { authorization: `Bearer ${ADMIN}` } })
    const cases: Array<[Family, Req]> = [
      ["openai", { method: "POST", target: "/v1/responses", headers: { authorization: `Bearer ${alphaKey}`, ...JSON_TYPE }, body: JSON.stringify({ model: MODEL, input: "hi" }) }],
      ["openai", { method: "DELETE", target: `/v1/responses/${A.response}`, headers: { authorization: `Bearer ${alphaKey}` } }],
      ["openai", { method: "DELETE", target: `/v1/files/${A.image}`, headers: { authorization: `Bearer ${alphaKey}` } }],
      ["openai", { method: "GET", target: `/v1/files/${A.image}/content`, headers: { authorization: `Bearer ${alphaKey}` } }],
      ["messages", { method: "POST", target: "/v1/messages", headers: { "x-api-key": alphaKey, ...AV, ...JSON_TYPE }, body: JSON.stringify(messagesBody("hi")) }],
      ["messages", { method: "DELETE", target: `/v1/files/${A.text}`, headers: { "x-api-key": alphaKey, ...AV } }],
      ["gemini", { method: "POST", target: `/v1beta/models/${MODEL}:generateContent`, headers: { "x-goog-api-key": alphaKey, ...JSON_TYPE }, body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }] }) }],
      ["gemini", { method: "DELETE", target: `/v1beta/files/${A.gemini.slice(5)}`, headers: { "x-goog-api-key": alphaKey } }],
      // a key-less chunk: the upload URL is the credential, the Host is still checked first
      ["gemini", chunk(A.upload, {}, Buffer.from("rebound"), "upload", A.uploadBytes.length)],
      ["gateway", { method: "GET", target: "/gateway/usage?app=alpha", headers: { authorization: `Bearer ${ADMIN}` } }],
      ["gateway", { method: "POST", target: "/gateway/admin/keys", headers: { authorization: `Bearer ${ADMIN}`, ...JSON_TYPE }, body: JSON.stringify({ app: "rebound" }) }],
      ["gateway", { method: "DELETE", target: `/gateway/admin/keys/${alphaKeyId}`, headers: { authorization: `Bearer ${ADMIN}` } }],
      ["gateway", { method: "GET", target: "/gateway/metrics", headers: { authorization: `Bearer ${ADMIN}` } }],
      ["gateway", { method: "GET", target: "/gateway/status", headers: { authorization: `Bearer ${ADMIN}` } }]
    ]
    for (const host of wrongHosts()) {
      for (const [family, req] of cases) {
        const r = await send(gw, { ...req, headers: { ...req.headers, host } })
        expectInvalidHost(family, r, req.target)
        expect(r.text).not.toContain(alphaKey)
      }
    }
    expect(upstream.requests.length, "a request with a wrong Host reached the upstream").toBe(upstreamBefore)
    const keysAfter = await call(gw, "GET", "/gateway/admin/keys", { headers: { authorization: `Bearer ${ADMIN}` } })
    expect(parse(keysAfter)).toEqual(parse(keysBefore))
    await expectAlphaIntact()
    // the same requests with this listener's own Host names are served
    for (const host of [`127.0.0.1:${gw.port}`, `localhost:${gw.port}`]) {
      const ok = await send(gw, { method: "GET", target: `/v1/files/${A.image}`, headers: { authorization: `Bearer ${alphaKey}`, host } })
      expect(ok.status, ok.text).toBe(200)
      const usage = await send(gw, { method: "GET", target: "/gateway/usage", headers: { authorization: `Bearer ${BETA}`, host } })
      expect(usage.status, usage.text).toBe(200)
    }
  })
})

// ---------------------------------------------------------------------------------------------
// Origin: browser requests from another site on a keyless gateway, on every family
// ---------------------------------------------------------------------------------------------

describe("Origin check on a keyless gateway, on every family", () => {
  let open: TestGateway
  let fileId = ""
  let uploadId = ""
  beforeAll(async () => {
    open = await startGateway({ providers: { mock: { type: "mock" } } })
    const form = formBody({ data: pngBytes(64), filename: "mine.png", type: "image/png" })
    const up = await call(open, "POST", "/v1/files", { headers: { "content-type": form.contentType }, body: form.body })
    expect(up.status, up.text).toBe(200)
    fileId = parse(up).id as string
    const start = await call(open, "POST", "/upload/v1beta/files", {
      headers: { ...JSON_TYPE, "x-goog-upload-protocol": "resumable", "x-goog-upload-command": "start" },
      body: JSON.stringify({ file: { displayName: "n.txt" } })
    })
    expect(start.status, start.text).toBe(200)
    uploadId = new URL(String(start.headers["x-goog-upload-url"])).searchParams.get("upload_id") as string
  })
  afterAll(async () => {
    await open?.close()
  })

  const cases = (): Array<[Family, Req]> => {
    const form = formBody({ data: pngBytes(64), filename: "evil.png", type: "image/png" })
    return [
      ["openai", { method: "POST", target: "/v1/chat/completions", headers: JSON_TYPE, body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "hi" }] }) }],
      ["openai", { method: "POST", target: "/v1/responses", headers: JSON_TYPE, body: JSON.stringify({ model: "mock/echo", input: "hi" }) }],
      ["openai", { method: "GET", target: "/v1/files", headers: {} }],
      ["openai", { method: "GET", target: `/v1/files/${fileId}/content`, headers: {} }],
      ["openai", { method: "POST", target: "/v1/files", headers: { "content-type": form.contentType }, body: form.body }],
      ["openai", { method: "DELETE", target: `/v1/files/${fileId}`, headers: {} }],
      ["messages", { method: "POST", target: "/v1/messages", headers: { ...AV, ...JSON_TYPE }, body: JSON.stringify({ model: "mock/echo", max_tokens: 16, messages: [{ role: "user", content: "hi" }] }) }],
      ["messages", { method: "GET", target: "/v1/files", headers: AV }],
      ["messages", { method: "DELETE", target: `/v1/files/${fileId}`, headers: AV }],
      ["gemini", { method: "POST", target: "/v1beta/models/mock/echo:generateContent", headers: JSON_TYPE, body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }] }) }],
      ["gemini", { method: "GET", target: "/v1beta/files", headers: {} }],
      ["gemini", { method: "DELETE", target: `/v1beta/files/${fileId.slice(5)}`, headers: {} }],
      ["gemini", chunk(uploadId, {}, Buffer.from("cross-site bytes"), "upload", 0)],
      ["gateway", { method: "GET", target: "/gateway/usage", headers: {} }],
      ["gateway", { method: "GET", target: "/gateway/metrics", headers: {} }],
      ["gateway", { method: "GET", target: "/gateway/status", headers: {} }],
      ["gateway", { method: "GET", target: "/gateway/admin/keys", headers: {} }]
    ]
  }

  it("a cross-site Origin is 403 in the family's envelope, and the request changes nothing", async () => {
    for (const origin of ["http://evil.example", `http://127.0.0.1:${open.port === 65535 ? 1 : open.port + 1}`, "null", `https://127.0.0.1:${open.port}.evil.example`]) {
      for (const [family, req] of cases()) {
        const r = await send(open, { ...req, headers: { ...req.headers, origin } })
        const where = `${origin} ${family} ${req.method} ${req.target}: ${r.status} ${r.text.slice(0, 200)}`
        expect(r.status, where).toBe(403)
        const body = parse(r)
        if (family === "openai") expect(body.error, where).toMatchObject({ type: "permission_error", code: "cross_origin_forbidden" })
        if (family === "messages") expect(body, where).toEqual({ type: "error", error: { type: "permission_error", message: expect.any(String) } })
        if (family === "gemini") expect(body.error, where).toMatchObject({ code: 403, status: "PERMISSION_DENIED" })
        if (family === "gateway") expectProblem(r, 403, "cross_origin_forbidden", { instance: req.target })
      }
    }
    // nothing changed: the file is there, no file was added, the upload holds no byte
    const list = await call(open, "GET", "/v1/files", {})
    expect((parse(list).data as Array<Json>).map((f) => f.id)).toEqual([fileId])
    const q = await send(open, chunk(uploadId, {}, Buffer.alloc(0), "query"))
    expect(q.status, q.text).toBe(200)
    expect(q.headers["x-goog-upload-size-received"]).toBe("0")
  })

  it("without an Origin, or with this gateway's own origin, the same requests are served", async () => {
    const own = `http://127.0.0.1:${open.port}`
    const none: Record<string, string> = {}
    for (const headers of [none, { origin: own }]) {
      // read-only ones: the destructive ones would change what the other cases look at
      for (const [family, req] of cases().filter(([, r]) => r.method !== "DELETE" && !r.target.startsWith("/upload/"))) {
        const r = await send(open, { ...req, headers: { ...req.headers, ...headers } })
        expect(r.status, `${family} ${req.method} ${req.target} ${JSON.stringify(headers)}: ${r.text.slice(0, 200)}`).toBe(200)
      }
    }
  })
})

// ---------------------------------------------------------------------------------------------
// Key comparison: hashed first, whatever its length or prefix
// ---------------------------------------------------------------------------------------------

/**
 * Structural, not statistical: with the presented key hashed (SHA-256) before it is looked up and
 * compared with timingSafeEqual on two 32-byte digests, the comparison cannot depend on the key's
 * length or on how long a prefix it shares with a real key. This watches node:crypto (calls pass
 * through unchanged) while real requests reach the in-process gateway. A median-of-samples timing
 * test is left out on purpose: a naive string comparison of ~30-byte keys differs by nanoseconds,
 * far below the scheduling noise of a loaded 2-core machine, so such a test could not fail when
 * the protection is removed and could flake when it is present.
 */
/** node:crypto's own (CommonJS) exports object: the one `syncBuiltinESMExports` copies into the ESM bindings. */
const crypto = createRequire(import.meta.url)("node:crypto") as typeof import("node:crypto")

describe("key comparison does not leak length or prefix", () => {
  it("every presented key is hashed with SHA-256 before comparison, and only 32-byte digests are compared", async () => {
    const hashed: Array<{ algorithm: string; data: string }> = []
    const compared: Array<[number, number]> = []
    const realCreateHash = crypto.createHash
    const realTimingSafeEqual = crypto.timingSafeEqual
    const watchedCreateHash = ((algorithm: string, options?: unknown) => {
      const hash = (realCreateHash as (a: string, o?: unknown) => Hash)(algorithm, options)
      const update = hash.update.bind(hash) as (data: unknown, encoding?: unknown) => Hash
      hash.update = ((data: unknown, encoding?: unknown) => {
        hashed.push({ algorithm: algorithm.toLowerCase(), data: typeof data === "string" ? data : Buffer.from(data as Uint8Array).toString("utf8") })
        update(data, encoding)
        return hash
      }) as typeof hash.update
      return hash
    }) as typeof crypto.createHash
    const watchedTimingSafeEqual = ((a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView) => {
      compared.push([a.byteLength, b.byteLength])
      return realTimingSafeEqual(a, b)
    }) as typeof crypto.timingSafeEqual
    crypto.createHash = watchedCreateHash
    crypto.timingSafeEqual = watchedTimingSafeEqual
    syncBuiltinESMExports()
    try {
      const presented = [
        "x",
        BETA.slice(0, BETA.length - 1), // a prefix of a real key
        `${BETA}x`, // a real key and one more character
        `${BETA.slice(0, -1)}${BETA.endsWith("9") ? "8" : "9"}`, // the same length, only the last character differs
        `sk-gw-${hex(48)}`, // the runtime-key shape
        revokedKey, // a key that was real
        "k".repeat(8000) // long
      ]
      const answers: Array<RawReply> = []
      for (const key of presented) {
        hashed.length = 0
        compared.length = 0
        const r = await call(gw, "GET", "/v1/files", { headers: { authorization: `Bearer ${key}` } })
        expect(r.status, `${key.length} chars: ${r.text}`).toBe(401)
        answers.push(r)
        expect(hashed, `the presented key of ${key.length} characters was not hashed with SHA-256`).toContainEqual({ algorithm: "sha256", data: key })
        for (const [a, b] of compared) {
          expect(a).toBe(32)
          expect(b).toBe(32)
        }
      }
      // the refusals are identical whatever was presented
      const first = normalized(answers[0], [])
      for (const r of answers) expect(normalized(r, [])).toEqual(first)

      // the real key: hashed, then the digests compared in constant time
      hashed.length = 0
      compared.length = 0
      const ok = await call(gw, "GET", "/v1/files", { headers: { authorization: `Bearer ${BETA}` } })
      expect(ok.status, ok.text).toBe(200)
      expect(hashed).toContainEqual({ algorithm: "sha256", data: BETA })
      expect(compared.length).toBeGreaterThanOrEqual(1)
      for (const [a, b] of compared) expect([a, b]).toEqual([32, 32])

      // the admin key on own routes: the same path
      for (const key of [ADMIN.slice(0, 5), `${ADMIN}-and-more`, ADMIN]) {
        hashed.length = 0
        compared.length = 0
        const r = await call(gw, "GET", "/gateway/status", { headers: { authorization: `Bearer ${key}` } })
        expect(r.status, r.text).toBe(key === ADMIN ? 200 : 401)
        expect(hashed).toContainEqual({ algorithm: "sha256", data: key })
        for (const [a, b] of compared) expect([a, b]).toEqual([32, 32])
      }
    } finally {
      crypto.createHash = realCreateHash
      crypto.timingSafeEqual = realTimingSafeEqual
      syncBuiltinESMExports()
    }
  })
})

// ---------------------------------------------------------------------------------------------
// Deleted by its owner: gone for everyone, exactly like an id that never existed (runs last)
// ---------------------------------------------------------------------------------------------

describe("a resource its owner deleted behaves like one that never existed, for the owner and the other app", () => {
  it("stored response and file: DELETE as alpha, then every probe as alpha and as beta answers as for a never-existed id", async () => {
    const r = await call(gw, "DELETE", `/v1/responses/${A.response}`, { headers: { authorization: `Bearer ${alphaKey}` } })
    expect(r.status, r.text).toBe(200)
    expect(parse(r)).toEqual({ id: A.response, object: "response.deleted", deleted: true })
    const f = await call(gw, "DELETE", `/v1/files/${A.image}`, { headers: { authorization: `Bearer ${alphaKey}` } })
    expect(f.status, f.text).toBe(200)
    expect(parse(f)).toEqual({ id: A.image, object: "file", deleted: true })
    const upstreamBefore = upstream.requests.length
    for (const { resource, id, probes } of resources().filter((x) => x.resource === "stored response" || x.resource === "file (image)")) {
      for (const p of probes) {
        for (const key of [alphaKey, BETA]) {
          const gone = id()
          const ghost = ghostOf(gone)
          const asGone = await send(gw, p.build(gone, key))
          const asGhost = await send(gw, p.build(ghost, key))
          const where = `${resource} / ${p.name} / ${key === BETA ? "beta" : "alpha"}: ${asGone.status} ${asGone.text.slice(0, 200)}`
          expect(normalized(asGone, [gone]), where).toEqual(normalized(asGhost, [ghost]))
          if (!p.name.includes("ids=")) expect(asGone.status, where).toBeGreaterThanOrEqual(400)
        }
      }
    }
    expect(upstream.requests.length).toBe(upstreamBefore)
  })
})
