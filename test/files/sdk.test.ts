/**
 * The Files APIs (spec 2.4, 4.4) through the three official SDKs, unchanged but for their base
 * URL: `openai` (chat/Responses shape on /v1/files), `@anthropic-ai/sdk` (Messages shape, chosen
 * by the `anthropic-version` header it always sends) and `@google/genai` (resumable uploads and
 * /v1beta/files). Then the isolation of apps on every route and in model requests, and
 * `apps.<name>.endpoints.files: false`.
 */
import Anthropic, { toFile as anthropicFile } from "@anthropic-ai/sdk"
import { GoogleGenAI } from "@google/genai"
import OpenAI, { toFile } from "openai"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { ACCEPTED, FILE_ID, GEMINI_NAME, PDF, PNG, TEXT, geminiBody, hexOf, pngOfSize, rejection } from "./fixtures.js"

const KEYS = {
  /** the openai section's app */
  oa: "sk-files-openai-0001",
  /** the anthropic section's app */
  an: "sk-files-anthropic-0001",
  /** the genai section's app */
  ge: "sk-files-genai-0001",
  /** isolation: A owns the files, B must not see them */
  a: "sk-files-app-a-0001",
  b: "sk-files-app-b-0001",
  /** `endpoints.files: false` */
  closed: "sk-files-closed-0001"
} as const

const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

let upstream: FakeUpstream
let gateway: TestGateway
let tmp: string

const openai = (key: string, fetchFn?: typeof fetch) =>
  new OpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, maxRetries: 0, timeout: 15_000, ...(fetchFn ? { fetch: fetchFn } : {}) })
const anthropic = (key: string) => new Anthropic({ apiKey: key, baseURL: gateway.url, maxRetries: 0, timeout: 15_000 })
const genai = (key: string) => new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: gateway.url, retryOptions: { attempts: 1 } } as never })

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "gw-files-sdk-"))
  upstream = await startFakeUpstream()
  gateway = await startGateway({
    keys: [
      { key: KEYS.oa, app: "oa" },
      { key: KEYS.an, app: "an" },
      { key: KEYS.ge, app: "ge" },
      { key: KEYS.a, app: "app-a" },
      { key: KEYS.b, app: "app-b" },
      { key: KEYS.closed, app: "closed" }
    ],
    providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" } },
    aliases: { "g-up": "up/m" },
    apps: { closed: { endpoints: { files: false } } }
  })
})
beforeEach(() => upstream.reset())
afterAll(async () => {
  await gateway?.close()
  await upstream?.close()
  if (tmp !== undefined) fs.rmSync(tmp, { recursive: true, force: true })
})

// -------------------------------------------------------------------------------------------------

describe("openai SDK: /v1/files in the chat/Responses shape", () => {
  it("files.create with toFile(Buffer) returns the file object; retrieve gives the same", async () => {
    const client = openai(KEYS.oa)
    const created = await client.files.create({ file: await toFile(Buffer.from(TEXT), "notes.txt"), purpose: "user_data" })
    expect(created.id).toMatch(FILE_ID)
    expect(created).toMatchObject({ object: "file", bytes: TEXT.length, filename: "notes.txt", purpose: "user_data", status: "processed" })
    expect(typeof created.created_at).toBe("number")
    expect(Math.abs(created.created_at - Date.now() / 1000)).toBeLessThan(60)
    // every file expires with the app's retention (30 days when unset)
    expect(created.expires_at! - created.created_at).toBe(30 * 24 * 3600)
    expect(await client.files.retrieve(created.id)).toEqual(created)
  })

  it("files.create with fs.createReadStream: sent chunked without content-length, stored whole", async () => {
    const file = path.join(tmp, "stream-doc.pdf")
    const bytes = Buffer.concat([PDF, Buffer.alloc(200_000, 0x20)])
    fs.writeFileSync(file, bytes)
    const sent: Array<Headers> = []
    const client = openai(KEYS.oa, async (url, init) => {
      sent.push(new Headers(init?.headers))
      return fetch(url, init)
    })
    const created = await client.files.create({ file: fs.createReadStream(file), purpose: "assistants" })
    expect(sent).toHaveLength(1)
    expect(sent[0].get("content-length")).toBeNull()
    expect(sent[0].get("content-type")).toMatch(/^multipart\/form-data; boundary=openai-/)
    expect(created).toMatchObject({ filename: "stream-doc.pdf", bytes: bytes.length, purpose: "assistants" })
    const content = await client.files.content(created.id)
    expect(content.headers.get("content-type")).toBe("application/pdf")
    expect(sha(new Uint8Array(await content.arrayBuffer()))).toBe(sha(bytes))
  })

  it("files.content: the bytes as an attachment of the stored type, never sniffed or run", async () => {
    const client = openai(KEYS.oa)
    const created = await client.files.create({ file: await toFile(PNG, "pixel.png"), purpose: "vision" })
    const response = await client.files.content(created.id)
    expect(response.status).toBe(200)
    expect(Buffer.from(await response.arrayBuffer()).equals(PNG)).toBe(true)
    expect(response.headers.get("content-type")).toBe("image/png")
    expect(response.headers.get("content-length")).toBe(String(PNG.length))
    expect(response.headers.get("content-disposition")).toMatch(/^attachment; filename="pixel\.png"/)
    expect(response.headers.get("x-content-type-options")).toBe("nosniff")
    expect(response.headers.get("content-security-policy")).toMatch(/\bsandbox\b/)
  })

  it("a text file's content says its charset", async () => {
    const client = openai(KEYS.oa)
    const created = await client.files.create({ file: await toFile(Buffer.from("# Überschrift\n"), "notes.md"), purpose: "user_data" })
    const response = await client.files.content(created.id)
    expect(response.headers.get("content-type")).toBe("text/markdown; charset=utf-8")
    expect(response.headers.get("content-disposition")).toBe(`attachment; filename="notes.md"; filename*=UTF-8''notes.md`)
    expect(await response.text()).toBe("# Überschrift\n")
  })

  // the SDKs send the filename as UTF-8 bytes: busboy must read them as UTF-8, not latin1 ("notizen-Ã¼.md")
  it("keeps a filename outside ASCII as sent", async () => {
    const client = openai(KEYS.oa)
    const created = await client.files.create({ file: await toFile(Buffer.from("x"), "notizen-ü.md"), purpose: "user_data" })
    try {
      expect(created.filename).toBe("notizen-ü.md")
      const response = await client.files.content(created.id)
      expect(response.headers.get("content-disposition")).toBe(`attachment; filename="notizen-_.md"; filename*=UTF-8''${encodeURIComponent("notizen-ü.md")}`)
    } finally {
      await client.files.delete(created.id)
    }
  })

  it("files.list: purpose filter, limit, pages through `after` and the SDK's auto-paging (newest first)", async () => {
    const client = openai(KEYS.oa)
    const ids: Array<string> = []
    for (let i = 0; i < 5; i++) ids.push((await client.files.create({ file: await toFile(Buffer.from(`eval ${i}`), `eval-${i}.txt`), purpose: "evals" })).id)
    const newestFirst = [...ids].reverse()

    const first = await client.files.list({ purpose: "evals", limit: 2 })
    expect(first.data.map((f) => f.id)).toEqual(newestFirst.slice(0, 2))
    expect(first.has_more).toBe(true)
    expect(first.data.every((f) => (f.purpose as string) === "evals")).toBe(true)
    const second = await first.getNextPage()
    expect(second.data.map((f) => f.id)).toEqual(newestFirst.slice(2, 4))

    const all: Array<string> = []
    for await (const file of client.files.list({ purpose: "evals", limit: 2 })) all.push(file.id)
    expect(all).toEqual(newestFirst)

    // after, by hand, oldest first
    const asc = await client.files.list({ purpose: "evals", order: "asc", after: ids[1] })
    expect(asc.data.map((f) => f.id)).toEqual(ids.slice(2))
    expect(asc.has_more).toBe(false)

    // the raw page: {object: list, data, first_id, last_id, has_more}
    const raw = await fetch(`${gateway.url}/v1/files?purpose=evals&limit=2`, { headers: { authorization: `Bearer ${KEYS.oa}` } })
    expect(raw.headers.get("content-type")).toMatch(/^application\/json/)
    const body = (await raw.json()) as Record<string, unknown>
    expect(body).toMatchObject({ object: "list", first_id: newestFirst[0], last_id: newestFirst[1], has_more: true })

    // the whole list holds other purposes too; the filter left them out
    const everything = await client.files.list()
    expect(everything.data.length).toBeGreaterThan(5)
    expect(new Set(everything.data.map((f) => f.purpose)).size).toBeGreaterThan(1)
  })

  it("files.list refuses a bad limit or order with 400 naming the parameter", async () => {
    const client = openai(KEYS.oa)
    const limit = await rejection(client.files.list({ limit: 0 }))
    expect(limit.status).toBe(400)
    expect(limit.param).toBe("limit")
    const order = await rejection(client.files.list({ order: "sideways" as never }))
    expect(order.status).toBe(400)
    expect(order.param).toBe("order")
  })

  it("files.delete, then every route answers 404 `No such File object: <id>`", async () => {
    const client = openai(KEYS.oa)
    const created = await client.files.create({ file: await toFile(Buffer.from("short lived"), "gone.txt"), purpose: "user_data" })
    expect(await client.files.delete(created.id)).toEqual({ id: created.id, object: "file", deleted: true })
    for (const call of [() => client.files.retrieve(created.id), () => client.files.content(created.id), () => client.files.delete(created.id)]) {
      const error = await rejection(call())
      expect(error).toBeInstanceOf(OpenAI.NotFoundError)
      expect(error.error).toMatchObject({ type: "invalid_request_error", message: `No such File object: ${created.id}` })
    }
    expect((await client.files.list()).data.map((f) => f.id)).not.toContain(created.id)
  })

  it("unknown and malformed ids are 404 with the id named", async () => {
    const client = openai(KEYS.oa)
    for (const id of [`file-${"0".repeat(32)}`, "file-abc", "nonsense"]) {
      const error = await rejection(client.files.retrieve(id))
      expect(error.status).toBe(404)
      expect(error.error.message).toBe(`No such File object: ${id}`)
    }
  })

  it("type detection: a PNG named a.txt and declared text/plain is stored as image/png", async () => {
    const client = openai(KEYS.oa)
    const created = await client.files.create({ file: await toFile(PNG, "a.txt", { type: "text/plain" }), purpose: "user_data" })
    const response = await client.files.content(created.id)
    expect(response.headers.get("content-type")).toBe("image/png")
    expect((await anthropic(KEYS.oa).beta.files.retrieveMetadata(created.id)).mime_type).toBe("image/png")
  })

  it("refuses an empty file, an unknown binary, invalid UTF-8 text and JSON that does not parse, naming the accepted kinds", async () => {
    const client = openai(KEYS.oa)
    const before = (await client.files.list()).data.length
    // all shorter than the 12 bytes the type check needs, so they are refused when the upload ends (see the next test)
    const cases: Array<[Buffer, string, string]> = [
      [Buffer.alloc(0), "empty.txt", "empty"],
      [Buffer.from([0x00, 0x01, 0x02, 0xfe, 0xff]), "blob.bin", "neither an image nor a PDF"],
      [Buffer.from([0x68, 0x69, 0x20, 0xff, 0xfe, 0x21, 0x0a]), "bad.txt", "not valid UTF-8"],
      [Buffer.from('{"a": [1, 2'), "data.json", "JSON does not parse"]
    ]
    for (const [bytes, name, why] of cases) {
      const error = await rejection(client.files.create({ file: await toFile(bytes, name), purpose: "user_data" }))
      expect(error.status, name).toBe(400)
      expect(error.error.code, name).toBe("invalid_file")
      expect(error.error.message, name).toContain(why)
      expect(error.error.message, name).toContain(ACCEPTED)
      expect(error.param, name).toBe("file")
    }
    // JSON that parses, declared by its extension only, is kept
    const json = await client.files.create({ file: await toFile(Buffer.from('{"ok": true}'), "data.json"), purpose: "user_data" })
    expect((await client.files.content(json.id)).headers.get("content-type")).toBe("application/json; charset=utf-8")
    // nothing was kept for the refused ones
    expect((await client.files.list()).data.length).toBe(before + 1)
  })

  // (a refusal raised while the file part is written once came out of Effect.runPromise as a FiberFailure and
  // answered 500 file_store_failed; Upload.ts now takes the failure itself)
  it("refuses what the type check finds while the bytes stream in: 400 invalid_file, text over 4 MiB 413", async () => {
    const client = openai(KEYS.oa)
    const cases: Array<[Buffer, string, number]> = [
      [Buffer.from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]), "blob.bin", 400],
      [Buffer.concat([Buffer.from("hello there, "), Buffer.from([0xff, 0xfe, 0xfd])]), "bad.txt", 400],
      [Buffer.alloc(4 * 1024 * 1024 + 1, 0x61), "big.txt", 413]
    ]
    const before = (await client.files.list()).data.length
    for (const [bytes, name, status] of cases) {
      const error = await rejection(client.files.create({ file: await toFile(bytes, name), purpose: "user_data" }))
      expect(error.status, name).toBe(status)
      if (status === 400) {
        expect(error.error.code, name).toBe("invalid_file")
        expect(error.error.message, name).toContain(ACCEPTED)
      } else expect(error.error.code, name).toBe("file_too_large")
    }
    const messages = await rejection(anthropic(KEYS.oa).beta.files.upload({ file: await anthropicFile(Buffer.alloc(64, 1), "x.bin") }))
    expect(messages.status).toBe(400)
    expect(messages.error.error.type).toBe("invalid_request_error")
    expect((await client.files.list()).data.length).toBe(before)
  })

  it("refuses an unknown purpose with 400 naming `purpose`, keeping nothing", async () => {
    const client = openai(KEYS.oa)
    const before = (await client.files.list()).data.length
    for (const purpose of ["fine-tune", "batch", "nope"]) {
      const error = await rejection(client.files.create({ file: await toFile(Buffer.from("x"), "x.txt"), purpose: purpose as never }))
      expect(error.status).toBe(400)
      expect(error.param).toBe("purpose")
      expect(error.error.message).toContain("user_data")
    }
    expect((await client.files.list()).data.length).toBe(before)
  })
})

// -------------------------------------------------------------------------------------------------

describe("@anthropic-ai/sdk: /v1/files in the Messages shape", () => {
  it("beta.files.upload returns the Messages-style object; retrieveMetadata gives the same", async () => {
    const client = anthropic(KEYS.an)
    const uploaded = await client.beta.files.upload({ file: await anthropicFile(PDF, "report.pdf", { type: "application/pdf" }) })
    expect(uploaded.id).toMatch(FILE_ID)
    expect(uploaded).toMatchObject({ type: "file", filename: "report.pdf", mime_type: "application/pdf", size_bytes: PDF.length, downloadable: true })
    expect(new Date(uploaded.created_at).toISOString()).toBe(uploaded.created_at)
    expect(typeof uploaded.expires_at).toBe("string")
    expect(await client.beta.files.retrieveMetadata(uploaded.id)).toEqual(uploaded)
    // the GA resource sends the same requests
    expect(await client.files.retrieveMetadata(uploaded.id)).toEqual(uploaded)
  })

  it("expires_in_seconds is accepted and ignored", async () => {
    const client = anthropic(KEYS.an)
    const uploaded = await client.beta.files.upload({ file: await anthropicFile(Buffer.from(TEXT), "short.txt", { type: "text/plain" }), expires_in_seconds: 60 } as never)
    expect(Date.parse(uploaded.expires_at!) - Date.parse(uploaded.created_at)).toBe(30 * 24 * 3600 * 1000)
  })

  it("beta.files.upload with fs.createReadStream and expires_in_seconds (sent before the file part)", async () => {
    const file = path.join(tmp, "stream-notes.txt")
    fs.writeFileSync(file, "streamed through the Messages SDK")
    const uploaded = await anthropic(KEYS.an).beta.files.upload({ file: fs.createReadStream(file), expires_in_seconds: 7200 } as never)
    expect(uploaded).toMatchObject({ filename: "stream-notes.txt", mime_type: "text/plain", size_bytes: 33 })
  })

  it("beta.files.download: the bytes and the attachment headers", async () => {
    const client = anthropic(KEYS.an)
    const uploaded = await client.beta.files.upload({ file: await anthropicFile(PNG, "pic.png") })
    expect(uploaded.mime_type).toBe("image/png")
    const response = await client.beta.files.download(uploaded.id)
    expect(Buffer.from(await response.arrayBuffer()).equals(PNG)).toBe(true)
    expect(response.headers.get("content-type")).toBe("image/png")
    expect(response.headers.get("content-disposition")).toMatch(/^attachment;/)
    expect(response.headers.get("x-content-type-options")).toBe("nosniff")
    expect(response.headers.get("content-security-policy")).toMatch(/\bsandbox\b/)
  })

  it("beta.files.list pages through next_page, newest first", async () => {
    const client = anthropic(KEYS.an)
    const existing = (await client.beta.files.list({ limit: 1000 })).data.map((f) => f.id)
    const ids: Array<string> = []
    for (let i = 0; i < 5; i++) ids.push((await client.beta.files.upload({ file: await anthropicFile(Buffer.from(`page ${i}`), `page-${i}.txt`) })).id)
    const expected = [...[...ids].reverse(), ...existing]

    const first = await client.beta.files.list({ limit: 2 })
    expect(first.data.map((f) => f.id)).toEqual(expected.slice(0, 2))
    expect(first.next_page).toBe(expected[1])
    expect(first.hasNextPage()).toBe(true)

    const all: Array<string> = []
    for await (const file of client.beta.files.list({ limit: 2 })) all.push(file.id)
    expect(all).toEqual(expected)

    // the raw page, asked with x-api-key and the neutral version header, `?beta=true` ignored
    for (const headers of <Array<Record<string, string>>>[{ "x-api-key": KEYS.an, "anthropic-version": "2023-06-01" }, { "x-api-key": KEYS.an, "messages-version": "2023-06-01" }]) {
      const raw = await fetch(`${gateway.url}/v1/files?beta=true&limit=2`, { headers })
      expect(await raw.json()).toMatchObject({ first_id: expected[0], last_id: expected[1], has_more: true, next_page: expected[1] })
    }
    // after_id and before_id, as older SDKs send them
    const after = await fetch(`${gateway.url}/v1/files?limit=2&after_id=${expected[1]}`, { headers: { "x-api-key": KEYS.an, "anthropic-version": "2023-06-01" } })
    expect(((await after.json()) as { data: Array<{ id: string }> }).data.map((f) => f.id)).toEqual(expected.slice(2, 4))
    const before = await fetch(`${gateway.url}/v1/files?limit=2&before_id=${expected[3]}`, { headers: { "x-api-key": KEYS.an, "anthropic-version": "2023-06-01" } })
    expect(((await before.json()) as { data: Array<{ id: string }> }).data.map((f) => f.id)).toEqual(expected.slice(1, 3))

    // `ids` narrows the list (the SDK sends them as ids[]=…)
    const picked = await client.beta.files.list({ ids: [ids[1], ids[3]] })
    expect(picked.data.map((f) => f.id)).toEqual([ids[3], ids[1]])

    const last = await client.beta.files.list({ limit: expected.length })
    expect(last.hasNextPage()).toBe(false)
    expect(last.next_page).toBeNull()
  })

  it("beta.files.delete, then 404 `File not found: <id>` in the Messages envelope", async () => {
    const client = anthropic(KEYS.an)
    const uploaded = await client.beta.files.upload({ file: await anthropicFile(Buffer.from("bye"), "bye.txt") })
    expect(await client.beta.files.delete(uploaded.id)).toEqual({ id: uploaded.id, type: "file_deleted" })
    for (const call of [() => client.beta.files.retrieveMetadata(uploaded.id), () => client.beta.files.download(uploaded.id), () => client.beta.files.delete(uploaded.id)]) {
      const error = await rejection(call())
      expect(error).toBeInstanceOf(Anthropic.NotFoundError)
      expect(error.error).toEqual({ type: "error", error: { type: "not_found_error", message: `File not found: ${uploaded.id}` } })
      expect(error.requestID).toBeTruthy()
    }
  })

  it("an upload refused for its kind is 400 in the Messages envelope", async () => {
    const error = await rejection(anthropic(KEYS.an).beta.files.upload({ file: await anthropicFile(Buffer.from([0, 1, 2, 3]), "x.bin") }))
    expect(error.status).toBe(400)
    expect(error.error.type).toBe("error")
    expect(error.error.error.type).toBe("invalid_request_error")
    expect(error.error.error.message).toContain(ACCEPTED)
  })
})

// -------------------------------------------------------------------------------------------------

describe("@google/genai SDK: resumable uploads and /v1beta/files", () => {
  it("files.upload (one chunk) returns the Gemini-style File; get by name and by uri", async () => {
    const ai = genai(KEYS.ge)
    const file = await ai.files.upload({ file: new Blob([TEXT], { type: "text/plain" }), config: { displayName: "Notes" } })
    expect(file.name).toMatch(GEMINI_NAME)
    const hex = file.name!.slice("files/".length)
    expect(file).toMatchObject({ displayName: "Notes", mimeType: "text/plain", sizeBytes: String(TEXT.length), state: "ACTIVE", source: "UPLOADED" })
    expect(file.uri).toBe(`${gateway.url}/v1beta/files/${hex}`)
    expect(file.createTime).toBe(file.updateTime)
    expect(Date.parse(file.expirationTime!) - Date.parse(file.createTime!)).toBe(30 * 24 * 3600 * 1000)
    const got = await ai.files.get({ name: file.name! })
    expect(got).toMatchObject({ name: file.name, displayName: "Notes", mimeType: "text/plain", uri: file.uri })
    // (the SDK strips only https:// uris to their name, so the loopback http uri cannot be passed to get)
    expect((await ai.files.get({ name: hex })).name).toBe(file.name)
    // the same file through the other shapes
    expect((await openai(KEYS.ge).files.retrieve(`file-${hex}`)).bytes).toBe(TEXT.length)
  })

  it("files.upload of a 9 MiB file goes in two chunks and arrives whole", async () => {
    const ai = genai(KEYS.ge)
    const big = pngOfSize(9 * 1024 * 1024)
    const chunks: Array<{ command: string | null; offset: string | null }> = []
    const realFetch = globalThis.fetch
    globalThis.fetch = (async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
      const url = String(input instanceof Request ? input.url : input)
      if (url.includes("upload_id=")) {
        const headers = new Headers(init?.headers)
        chunks.push({ command: headers.get("x-goog-upload-command"), offset: headers.get("x-goog-upload-offset") })
      }
      return realFetch(input, init)
    }) as typeof fetch
    let file
    try {
      file = await ai.files.upload({ file: new Blob([big], { type: "image/png" }), config: { displayName: "big.png" } })
    } finally {
      globalThis.fetch = realFetch
    }
    expect(chunks).toEqual([
      { command: "upload", offset: "0" },
      { command: "upload, finalize", offset: String(8 * 1024 * 1024) }
    ])
    expect(file).toMatchObject({ mimeType: "image/png", sizeBytes: String(big.length), displayName: "big.png" })
    const content = await openai(KEYS.ge).files.content(`file-${file.name!.slice("files/".length)}`)
    expect(sha(new Uint8Array(await content.arrayBuffer()))).toBe(sha(big))
  })

  it("files.upload from a path (the SDK takes the type from the extension)", async () => {
    const file = path.join(tmp, "readme.txt")
    fs.writeFileSync(file, "# Read me\n")
    const uploaded = await genai(KEYS.ge).files.upload({ file })
    expect(uploaded).toMatchObject({ mimeType: "text/plain", sizeBytes: "10" })
  })

  it("files.list pages with pageSize, oldest first, ending without a nextPageToken", async () => {
    const ai = genai(KEYS.ge)
    const existing: Array<string> = []
    for await (const f of await ai.files.list({ config: { pageSize: 100 } })) existing.push(f.name!)
    const added: Array<string> = []
    for (let i = 0; i < 3; i++) added.push((await ai.files.upload({ file: new Blob([`listed ${i}`], { type: "text/plain" }) })).name!)
    const expected = [...existing, ...added]

    const pager = await ai.files.list({ config: { pageSize: 2 } })
    expect(pager.page.map((f) => f.name)).toEqual(expected.slice(0, 2))
    expect(pager.hasNextPage()).toBe(true)
    const all: Array<string> = []
    for await (const f of pager) all.push(f.name!)
    expect(all).toEqual(expected)

    // the raw last page has no nextPageToken at all (an empty one would make the SDK loop)
    const raw = await fetch(`${gateway.url}/v1beta/files?pageSize=100`, { headers: { "x-goog-api-key": KEYS.ge } })
    const body = (await raw.json()) as Record<string, unknown>
    expect("nextPageToken" in body).toBe(false)
  })

  it("files.delete answers {}; then `File files/<hex> was not found`", async () => {
    const ai = genai(KEYS.ge)
    const file = await ai.files.upload({ file: new Blob(["to delete"], { type: "text/plain" }) })
    await ai.files.delete({ name: file.name! })
    for (const call of [() => ai.files.get({ name: file.name! }), () => ai.files.delete({ name: file.name! })]) {
      const error = await rejection(call())
      expect(error.status).toBe(404)
      expect(geminiBody(error).error).toEqual({ code: 404, status: "NOT_FOUND", message: `File ${file.name} was not found` })
    }
    const raw = await fetch(`${gateway.url}/v1beta/files/${file.name!.slice(6)}`, { method: "DELETE", headers: { "x-goog-api-key": KEYS.ge } })
    expect(raw.status).toBe(404)
  })

  it("a refused kind at finalize is 400 INVALID_ARGUMENT and keeps nothing", async () => {
    const ai = genai(KEYS.ge)
    const before = (await openai(KEYS.ge).files.list()).data.length
    const error = await rejection(ai.files.upload({ file: new Blob([new Uint8Array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])], { type: "application/octet-stream" }) }))
    expect(error.status).toBe(400)
    expect(geminiBody(error).error.status).toBe("INVALID_ARGUMENT")
    expect(geminiBody(error).error.message).toContain(ACCEPTED)
    expect((await openai(KEYS.ge).files.list()).data.length).toBe(before)
  })
})

// -------------------------------------------------------------------------------------------------

describe("isolation: another app's file is not there, on every route and in model requests", () => {
  let fileId: string
  let hex: string
  const bytes = Buffer.from("app A's secret notes")

  beforeAll(async () => {
    fileId = (await openai(KEYS.a).files.create({ file: await toFile(bytes, "secret.txt"), purpose: "user_data" })).id
    hex = hexOf(fileId)
  })

  it("openai shape: retrieve, content and delete are 404; list does not show it", async () => {
    const b = openai(KEYS.b)
    for (const call of [() => b.files.retrieve(fileId), () => b.files.content(fileId), () => b.files.delete(fileId)]) {
      const error = await rejection(call())
      expect(error.status).toBe(404)
      expect(error.error.message).toBe(`No such File object: ${fileId}`)
    }
    expect((await b.files.list()).data).toEqual([])
    // `after` naming A's file is no cursor of B's listing
    expect((await rejection(b.files.list({ after: fileId }))).status).toBe(400)
  })

  it("Messages shape: retrieveMetadata, download and delete are 404; list and ids do not show it", async () => {
    const b = anthropic(KEYS.b)
    for (const call of [() => b.beta.files.retrieveMetadata(fileId), () => b.beta.files.download(fileId), () => b.beta.files.delete(fileId)]) {
      const error = await rejection(call())
      expect(error.status).toBe(404)
      expect(error.error.error).toEqual({ type: "not_found_error", message: `File not found: ${fileId}` })
    }
    expect((await b.beta.files.list()).data).toEqual([])
    expect((await b.beta.files.list({ ids: [fileId] })).data).toEqual([])
  })

  it("Gemini shape: get and delete are 404; list does not show it", async () => {
    const b = genai(KEYS.b)
    for (const call of [() => b.files.get({ name: `files/${hex}` }), () => b.files.delete({ name: `files/${hex}` })]) {
      const error = await rejection(call())
      expect(error.status).toBe(404)
      expect(geminiBody(error).error.message).toBe(`File files/${hex} was not found`)
    }
    expect((await b.files.list()).page).toEqual([])
  })

  it("Gemini upload URL: a chunk with another app's key is 404 and the upload goes on", async () => {
    const start = await fetch(`${gateway.url}/upload/v1beta/files`, {
      method: "POST",
      headers: {
        "x-goog-api-key": KEYS.a,
        "content-type": "application/json",
        "x-goog-upload-protocol": "resumable",
        "x-goog-upload-command": "start",
        "x-goog-upload-header-content-length": "5",
        "x-goog-upload-header-content-type": "text/plain"
      },
      body: JSON.stringify({ file: { displayName: "a-upload" } })
    })
    expect(start.status).toBe(200)
    const url = start.headers.get("x-goog-upload-url")!
    expect(url).toMatch(new RegExp(`^${gateway.url}/upload/v1beta/files\\?upload_id=[0-9a-f]{32}`))
    const chunk = (key: string) =>
      fetch(url, { method: "POST", headers: { "x-goog-api-key": key, "x-goog-upload-command": "upload, finalize", "x-goog-upload-offset": "0" }, body: "hello" })
    const stolen = await chunk(KEYS.b)
    expect(stolen.status).toBe(404)
    expect(((await stolen.json()) as { error: { status: string } }).error.status).toBe("NOT_FOUND")
    const own = await chunk(KEYS.a)
    expect(own.status).toBe(200)
    expect(own.headers.get("x-goog-upload-status")).toBe("final")
    const { file } = (await own.json()) as { file: { name: string; displayName: string } }
    expect(file.displayName).toBe("a-upload")
    await openai(KEYS.a).files.delete(`file-${file.name.slice(6)}`)
  })

  it("model requests of app B naming A's file get each protocol's not-found; nothing reaches the upstream", async () => {
    const chat = await rejection(
      openai(KEYS.b).chat.completions.create({ model: "up/m", messages: [{ role: "user", content: [{ type: "file", file: { file_id: fileId } }] }] })
    )
    expect(chat.status).toBe(404)
    expect(chat.error).toMatchObject({ type: "invalid_request_error", message: `No such File object: ${fileId}`, param: "messages.0.content.0.file.file_id" })

    const responses = await rejection(
      openai(KEYS.b).responses.create({ model: "up/m", input: [{ role: "user", content: [{ type: "input_file", file_id: fileId }] }] })
    )
    expect(responses.status).toBe(404)
    expect(responses.error).toMatchObject({ message: `No such File object: ${fileId}`, param: "input.0.content.0.file_id" })

    const messages = await rejection(
      anthropic(KEYS.b).messages.create({
        model: "up/m",
        max_tokens: 10,
        messages: [{ role: "user", content: [{ type: "document", source: { type: "file", file_id: fileId } } as never] }]
      })
    )
    expect(messages.status).toBe(404)
    expect(messages.error.error).toEqual({ type: "not_found_error", message: `File not found: ${fileId}` })

    for (const fileUri of [`files/${hex}`, `${gateway.url}/v1beta/files/${hex}`]) {
      const gemini = await rejection(genai(KEYS.b).models.generateContent({ model: "g-up", contents: [{ role: "user", parts: [{ fileData: { fileUri, mimeType: "text/plain" } }] }] }))
      expect(gemini.status).toBe(404)
      expect(geminiBody(gemini).error).toMatchObject({ status: "NOT_FOUND", message: `File files/${hex} was not found` })
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it("A's file survives all of it", async () => {
    const a = openai(KEYS.a)
    expect((await a.files.retrieve(fileId)).filename).toBe("secret.txt")
    expect(Buffer.from(await (await a.files.content(fileId)).arrayBuffer()).equals(bytes)).toBe(true)
    expect((await a.files.list()).data.map((f) => f.id)).toContain(fileId)
  })
})

// -------------------------------------------------------------------------------------------------

describe("apps.<name>.endpoints.files: false refuses every Files route", () => {
  const someId = `file-${"a".repeat(32)}`

  it("openai shape: 403 permission_error on create, list, retrieve, content, delete", async () => {
    const client = openai(KEYS.closed)
    const calls: Array<() => Promise<unknown>> = [
      async () => client.files.create({ file: await toFile(Buffer.from("x"), "x.txt"), purpose: "user_data" }),
      () => client.files.list(),
      () => client.files.retrieve(someId),
      () => client.files.content(someId),
      () => client.files.delete(someId)
    ]
    for (const call of calls) {
      const error = await rejection(call())
      expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError)
      expect(error.error.code).toBe("files_forbidden")
    }
  })

  it("Messages shape: 403 permission_error on upload, list, retrieveMetadata, download, delete", async () => {
    const client = anthropic(KEYS.closed)
    const calls: Array<() => Promise<unknown>> = [
      async () => client.beta.files.upload({ file: await anthropicFile(Buffer.from("x"), "x.txt") }),
      () => client.beta.files.list(),
      () => client.beta.files.retrieveMetadata(someId),
      () => client.beta.files.download(someId),
      () => client.beta.files.delete(someId)
    ]
    for (const call of calls) {
      const error = await rejection(call())
      expect(error).toBeInstanceOf(Anthropic.PermissionDeniedError)
      expect(error.error.error.type).toBe("permission_error")
    }
  })

  it("Gemini shape: 403 PERMISSION_DENIED on upload (resumable and multipart), get, list, delete", async () => {
    const ai = genai(KEYS.closed)
    const calls: Array<() => Promise<unknown>> = [
      () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }),
      () => ai.files.list(),
      () => ai.files.get({ name: `files/${hexOf(someId)}` }),
      () => ai.files.delete({ name: `files/${hexOf(someId)}` })
    ]
    for (const call of calls) {
      const error = await rejection(call())
      expect(error.status).toBe(403)
      expect(geminiBody(error).error.status).toBe("PERMISSION_DENIED")
    }
    const boundary = "b0undary"
    const body = `--${boundary}\r\nContent-Type: application/json\r\n\r\n{"file":{"displayName":"x"}}\r\n--${boundary}\r\nContent-Type: text/plain\r\n\r\nhello\r\n--${boundary}--\r\n`
    const multipart = await fetch(`${gateway.url}/upload/v1beta/files?uploadType=multipart`, {
      method: "POST",
      headers: { "x-goog-api-key": KEYS.closed, "content-type": `multipart/related; boundary=${boundary}` },
      body
    })
    expect(multipart.status).toBe(403)
    expect(((await multipart.json()) as { error: { status: string } }).error.status).toBe("PERMISSION_DENIED")
  })
})
