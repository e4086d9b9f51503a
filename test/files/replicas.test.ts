/**
 * Files across replicas over HTTP (issue 16): two gateways on one PostgreSQL database, requests
 * alternating between them. A file uploaded on one is retrieved, downloaded, listed (all three
 * shapes), delivered to a model and deleted on the other; a resumable upload started on one takes
 * keyless chunks on both and is finalized on the other; upload URLs and file uris name the public
 * origin (the trusted proxy's forwarded host), never a replica's own address.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { hexOf, pngOfSize } from "./fixtures.js"

const KEY = "sk-files-replicas-0001"
const PUBLIC = { "x-forwarded-host": "llm.example.test", "x-forwarded-proto": "https" }

type Json = Record<string, any>

let db: TestDatabase
let up: FakeUpstream
let a: TestGateway
let b: TestGateway

const call = async (gateway: TestGateway, path: string, init: RequestInit & { readonly key?: string | null } = {}) => {
  const headers = new Headers(init.headers)
  if (init.key !== null) headers.set("authorization", `Bearer ${init.key ?? KEY}`)
  return fetch(`${gateway.url}${path}`, { ...init, headers })
}

const uploadForm = (bytes: Buffer, name: string, type: string) => {
  const form = new FormData()
  form.set("purpose", "user_data")
  form.set("file", new Blob([bytes], { type }), name)
  return form
}

describe.skipIf(!hasPostgres)("files on two replicas of one PostgreSQL database", () => {
  beforeAll(async () => {
    db = await freshDatabase()
    up = await startFakeUpstream()
    const document = {
      database: { url: db.url, poolSize: 4 },
      listen: { trustProxy: true },
      keys: [{ key: KEY, app: "team" }],
      providers: { up: { type: "openai", baseUrl: up.url, apiKey: "k" } },
      aliases: { m: "up/m" }
    }
    a = await startGateway(document)
    b = await startGateway(document)
  }, 60_000)
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await up?.close()
    await db?.drop()
  })

  it("uploaded on A: retrieved, downloaded and listed in every shape on B, delivered to a model by B, deleted on B", async () => {
    const image = pngOfSize(600 * 1024)
    const created = (await (await call(a, "/v1/files", { method: "POST", body: uploadForm(image, "big.png", "image/png") })).json()) as Json
    expect(created).toMatchObject({ object: "file", bytes: image.length, filename: "big.png" })
    const id = created.id as string

    expect(await (await call(b, `/v1/files/${id}`)).json()).toEqual(created)
    const download = await call(b, `/v1/files/${id}/content`)
    expect(download.status).toBe(200)
    expect(download.headers.get("content-length")).toBe(String(image.length))
    expect(Buffer.from(await download.arrayBuffer()).equals(image)).toBe(true)

    const chatList = (await (await call(b, "/v1/files")).json()) as Json
    expect(chatList.data.map((f: Json) => f.id)).toEqual([id])
    const messagesList = (await (await call(b, "/v1/files", { headers: { "anthropic-version": "2023-06-01" } })).json()) as Json
    expect(messagesList.data).toEqual([expect.objectContaining({ id, type: "file", size_bytes: image.length })])
    const gemini = (await (await call(b, `/v1beta/files/${hexOf(id)}`, { headers: PUBLIC })).json()) as Json
    expect(gemini).toMatchObject({ name: `files/${hexOf(id)}`, sizeBytes: String(image.length), uri: `https://llm.example.test/v1beta/files/${hexOf(id)}` })

    up.reset()
    const answer = await call(b, "/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, { type: "file", file: { file_id: id } }] }] })
    })
    expect(answer.status).toBe(200)
    const sent = JSON.stringify(up.requests[up.requests.length - 1].body)
    expect(sent).toContain(image.toString("base64").slice(0, 1000))

    const removed = await call(b, `/v1/files/${id}`, { method: "DELETE" })
    expect(await removed.json()).toEqual({ id, object: "file", deleted: true })
    const gone = await call(a, `/v1/files/${id}`)
    expect(gone.status).toBe(404)
    expect(((await gone.json()) as Json).error).toMatchObject({ type: "invalid_request_error" })
    const geminiGone = await call(a, `/v1beta/files/${hexOf(id)}`)
    expect(geminiGone.status).toBe(404)
    expect(((await geminiGone.json()) as Json).error).toMatchObject({ code: 404, status: "NOT_FOUND" })
  })

  it("a download the client abandons half way ends cleanly; the replica keeps serving", async () => {
    const image = pngOfSize(2 * 1024 * 1024)
    const id = ((await (await call(a, "/v1/files", { method: "POST", body: uploadForm(image, "huge.png", "image/png") })).json()) as Json).id as string
    const abort = new AbortController()
    const response = await call(b, `/v1/files/${id}/content`, { signal: abort.signal })
    expect(response.status).toBe(200)
    const reader = response.body!.getReader()
    expect((await reader.read()).done).toBe(false)
    abort.abort()
    await reader.read().catch(() => undefined)
    const again = await call(b, `/v1/files/${id}/content`)
    expect(Buffer.from(await again.arrayBuffer()).equals(image)).toBe(true)
    expect((await call(b, `/v1/files/${id}`, { method: "DELETE" })).status).toBe(200)
  })

  it("a resumable upload started on A takes keyless chunks on B and A and is finalized on B; its URL names the public origin", async () => {
    const image = pngOfSize(400 * 1024)
    const start = await call(a, "/upload/v1beta/files", {
      method: "POST",
      headers: {
        ...PUBLIC,
        "content-type": "application/json",
        "x-goog-upload-protocol": "resumable",
        "x-goog-upload-command": "start",
        "x-goog-upload-header-content-length": String(image.length),
        "x-goog-upload-header-content-type": "image/png"
      },
      body: JSON.stringify({ file: { displayName: "Photo" } })
    })
    expect(start.status).toBe(200)
    const url = new URL(start.headers.get("x-goog-upload-url")!)
    expect(url.origin).toBe("https://llm.example.test")
    const target = `${url.pathname}${url.search}`
    const chunk = (gateway: TestGateway, from: number, to: number, command: string) =>
      call(gateway, target, {
        method: "POST",
        key: null,
        headers: { ...PUBLIC, "x-goog-upload-command": command, "x-goog-upload-offset": String(from) },
        body: image.subarray(from, to)
      })
    const first = await chunk(b, 0, 150 * 1024, "upload")
    expect(first.status).toBe(200)
    expect(first.headers.get("x-goog-upload-size-received")).toBe(String(150 * 1024))
    expect((await chunk(b, 0, 10, "upload")).status).toBe(400)
    expect((await chunk(a, 150 * 1024, 300 * 1024, "upload")).status).toBe(200)
    const last = await chunk(b, 300 * 1024, image.length, "upload, finalize")
    expect(last.status).toBe(200)
    const file = ((await last.json()) as Json).file as Json
    expect(file).toMatchObject({ displayName: "Photo", mimeType: "image/png", sizeBytes: String(image.length) })
    expect(file.uri).toMatch(/^https:\/\/llm\.example\.test\/v1beta\/files\/[0-9a-f]{32}$/)
    const hex = (file.name as string).slice("files/".length)
    const download = await call(a, `/v1/files/file-${hex}/content`)
    expect(Buffer.from(await download.arrayBuffer()).equals(image)).toBe(true)
    // finished: the URL names no upload on either replica
    expect((await chunk(a, image.length, image.length, "finalize")).status).toBe(401)
  })
})

describe.skipIf(!hasPostgres)("files with the database lost while serving", () => {
  let lost: TestDatabase
  let gateway: TestGateway
  beforeAll(async () => {
    lost = await freshDatabase()
    gateway = await startGateway({ database: { url: lost.url, poolSize: 2 }, keys: [{ key: KEY, app: "team" }] })
  }, 60_000)
  afterAll(async () => {
    await gateway?.close()
    await lost?.drop()
  })

  it("every files route answers 503 in its own envelope, never a 500", async () => {
    const created = await call(gateway, "/v1/files", { method: "POST", body: uploadForm(Buffer.from("remember"), "a.txt", "text/plain") })
    expect(created.status).toBe(200)
    const id = ((await created.json()) as Json).id as string
    await lost.drop()

    const chat = await call(gateway, `/v1/files/${id}`)
    expect(chat.status).toBe(503)
    expect(((await chat.json()) as Json).error).toMatchObject({ code: "database_unavailable" })
    const messages = await call(gateway, "/v1/files", { headers: { "anthropic-version": "2023-06-01" } })
    expect(messages.status).toBe(503)
    expect((await messages.json()) as Json).toMatchObject({ type: "error", error: { type: expect.any(String) } })
    const gemini = await call(gateway, "/v1beta/files")
    expect(gemini.status).toBe(503)
    expect(((await gemini.json()) as Json).error).toMatchObject({ code: 503, status: "UNAVAILABLE" })
    const upload = await call(gateway, "/v1/files", { method: "POST", body: uploadForm(Buffer.from("more"), "b.txt", "text/plain") })
    expect(upload.status).toBe(503)
    const start = await call(gateway, "/upload/v1beta/files", {
      method: "POST",
      headers: { "x-goog-upload-protocol": "resumable", "x-goog-upload-command": "start", "content-type": "application/json" },
      body: "{}"
    })
    expect(start.status).toBe(503)
  })
})

describe("the origin in upload URLs behind a load balancer without forwarded headers", () => {
  let gateway: TestGateway
  beforeAll(async () => {
    gateway = await startGateway({ listen: { hosts: ["llm.example.test"] }, keys: [{ key: KEY, app: "team" }] })
  }, 60_000)
  afterAll(async () => {
    await gateway?.close()
  })

  it("names the public Host the request came with (on the listen.hosts list), not the replica's listen address", async () => {
    const headers = await new Promise<http.IncomingHttpHeaders>((resolve, reject) => {
      const request = http.request(
        {
          host: "127.0.0.1",
          port: gateway.port,
          method: "POST",
          path: "/upload/v1beta/files",
          headers: {
            host: "llm.example.test",
            authorization: `Bearer ${KEY}`,
            "x-goog-upload-protocol": "resumable",
            "x-goog-upload-command": "start",
            "content-length": "0"
          }
        },
        (response) => {
          response.resume()
          response.on("end", () => resolve(response.headers))
        }
      )
      request.on("error", reject)
      request.end()
    })
    expect(headers["x-goog-upload-url"]).toMatch(/^http:\/\/llm\.example\.test\/upload\/v1beta\/files\?upload_id=[0-9a-f]{32}&upload_protocol=resumable$/)
  })
})
