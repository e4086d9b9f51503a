/**
 * Scale-out (issue 16): two gateway processes (`node dist/main.js`) on one PostgreSQL database,
 * every request alternating between them. Runtime keys, Responses chains, files in all three
 * shapes, a resumable upload whose chunks alternate, usage read from either replica; then one
 * replica is killed with SIGKILL during uploads and stores, and the other keeps serving with
 * nothing acknowledged lost.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { childGateways, killHard, type Child } from "../support/ChildGateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { call, formBody, jsonOf, KiB, pngBytes, relatedBody, sha256, sleep, textBytes } from "../files/uploadWire.js"

const ADMIN = "admin-key-replicas-0123456789"
const KEY = "sk-replicas-config-key-0123456789"

const gateways = childGateways()
let db: TestDatabase
let a: Child
let b: Child
/** the two replicas, alternated: request i goes to replicas[i % 2] */
let replicas: Array<Child>
let turn = 0
const next = () => replicas[turn++ % 2]

const config = (url: string, id: string) => [
  `adminKey: ${ADMIN}`,
  `replicaId: ${id}`,
  `database: { url: ${JSON.stringify(url)}, poolSize: 4 }`,
  "providers: { mock: { type: mock } }",
  "keys:",
  `  - { key: ${KEY}, app: team }`
]

const bearer = (key: string) => ({ authorization: `Bearer ${key}` })
const json = { "content-type": "application/json" }

const chat = (replica: Child, key: string, text = "ping") =>
  call(replica.port, "POST", "/v1/chat/completions", { ...bearer(key), ...json }, JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: text }] }))

describe.skipIf(!hasPostgres)("two replicas on one PostgreSQL database", () => {
  beforeAll(async () => {
    db = await freshDatabase()
    const wa = gateways.workspace("gw-replica-a-", config(db.url, "replica-a"))
    const wb = gateways.workspace("gw-replica-b-", config(db.url, "replica-b"))
    // started together: migrations run once, under the advisory lock
    ;[a, b] = await Promise.all([gateways.start(wa.cwd, wa.configFile), gateways.start(wb.cwd, wb.configFile)])
    replicas = [a, b]
  }, 60_000)

  afterAll(async () => {
    await gateways.cleanup()
    await db?.drop()
  })

  it("a runtime key made on one replica works on the other at once; revoked on one, refused on the other soon after", async () => {
    const made = await call(next().port, "POST", "/gateway/admin/keys", { ...bearer(ADMIN), ...json }, JSON.stringify({ app: "runtime-app" }))
    expect(made.status, made.text).toBe(201)
    const { id, key } = jsonOf(made) as { id: string; key: string }
    for (let i = 0; i < 4; i++) expect((await chat(next(), key)).status).toBe(200)
    const listed = await call(next().port, "GET", "/gateway/admin/keys", bearer(ADMIN))
    expect(listed.text).toContain(id)
    expect(listed.text).not.toContain(key)
    const revokedOn = next()
    const other = revokedOn === a ? b : a
    expect((await call(revokedOn.port, "DELETE", `/gateway/admin/keys/${id}`, bearer(ADMIN))).status).toBe(200)
    expect((await chat(revokedOn, key)).status).toBe(401)
    // the 1 s bound is the mechanism's (NOTIFY, else the 400 ms poll: test/services/keys/KeyStore.replicas.test.ts); 10 s is a backstop
    const started = Date.now()
    let status = 200
    while (Date.now() - started < 10_000) {
      status = (await chat(other, key)).status
      if (status === 401) break
      await sleep(50)
    }
    expect(status).toBe(401)
  })

  it("a Responses chain continues on either replica; GET, input_items and DELETE work across them", async () => {
    let previous: string | undefined
    const ids: Array<string> = []
    for (let i = 0; i < 6; i++) {
      const answer = await call(
        next().port,
        "POST",
        "/v1/responses",
        { ...bearer(KEY), ...json },
        JSON.stringify({ model: "mock/echo", input: `turn ${i}`, ...(previous ? { previous_response_id: previous } : {}) })
      )
      expect(answer.status, answer.text).toBe(200)
      previous = String(jsonOf(answer).id)
      ids.push(previous)
    }
    const got = await call(next().port, "GET", `/v1/responses/${previous}`, bearer(KEY))
    expect(got.status).toBe(200)
    expect(jsonOf(got).previous_response_id).toBe(ids[4])
    const items = await call(next().port, "GET", `/v1/responses/${previous}/input_items?order=asc&limit=100`, bearer(KEY))
    expect(items.status).toBe(200)
    const texts = (jsonOf(items).data as Array<{ role?: string; content?: Array<{ text?: string }> }>).filter((item) => item.role === "user").map((item) => item.content?.[0]?.text)
    expect(texts).toEqual(["turn 0", "turn 1", "turn 2", "turn 3", "turn 4", "turn 5"])
    expect((await call(next().port, "DELETE", `/v1/responses/${ids[2]}`, bearer(KEY))).status).toBe(200)
    expect((await call(next().port, "GET", `/v1/responses/${ids[2]}`, bearer(KEY))).status).toBe(404)
    expect((await call(next().port, "GET", `/v1/responses/${ids[2]}`, bearer(KEY))).status).toBe(404)
  })

  it("files in all three shapes: uploaded on one replica, listed, read and deleted on the other", async () => {
    // OpenAI shape
    const data = textBytes(300 * KiB)
    const form = formBody({ filename: "notes.txt", type: "text/plain", data })
    const up = await call(next().port, "POST", "/v1/files", { ...bearer(KEY), "content-type": form.contentType }, form.body)
    expect(up.status, up.text).toBe(200)
    const fileId = String(jsonOf(up).id)
    const content = await call(next().port, "GET", `/v1/files/${fileId}/content`, bearer(KEY))
    expect(content.status).toBe(200)
    expect(sha256(content.body)).toBe(sha256(data))
    // Messages shape (a Messages version header), the same file
    const listed = await call(next().port, "GET", "/v1/files", { "x-api-key": KEY, "anthropic-version": "2023-06-01" })
    expect(listed.status).toBe(200)
    expect((jsonOf(listed).data as Array<{ id: string }>).map((f) => f.id)).toContain(fileId)
    // Gemini shape: multipart upload on one, get on the other
    const png = pngBytes(40 * KiB)
    const related = relatedBody({ file: { displayName: "pic" } }, png)
    const gup = await call(next().port, "POST", "/upload/v1beta/files?uploadType=multipart", { "x-goog-api-key": KEY, "content-type": related.contentType }, related.body)
    expect(gup.status, gup.text).toBe(200)
    const name = String((jsonOf(gup).file as { name: string }).name)
    const gget = await call(next().port, "GET", `/v1beta/${name}`, { "x-goog-api-key": KEY })
    expect(gget.status, gget.text).toBe(200)
    expect(Number((jsonOf(gget) as { sizeBytes?: string }).sizeBytes)).toBe(png.length)
    // a model request on either replica reads the stored file
    const withFile = await call(
      next().port,
      "POST",
      "/v1/responses",
      { ...bearer(KEY), ...json },
      JSON.stringify({ model: "mock/echo", store: false, input: [{ role: "user", content: [{ type: "input_text", text: "read it" }, { type: "input_file", file_id: fileId }] }] })
    )
    expect(withFile.status, withFile.text).toBe(200)
    expect((await call(next().port, "DELETE", `/v1/files/${fileId}`, bearer(KEY))).status).toBe(200)
    expect((await call(next().port, "GET", `/v1/files/${fileId}`, bearer(KEY))).status).toBe(404)
  })

  it("a resumable upload: started on one replica, chunks alternating, keyless chunks by upload URL, finalized on the other", async () => {
    const data = pngBytes(600 * KiB)
    const start = await call(
      next().port,
      "POST",
      "/upload/v1beta/files",
      {
        "x-goog-api-key": KEY,
        ...json,
        "x-goog-upload-protocol": "resumable",
        "x-goog-upload-command": "start",
        "x-goog-upload-header-content-length": String(data.length),
        "x-goog-upload-header-content-type": "image/png"
      },
      JSON.stringify({ file: { displayName: "alternating" } })
    )
    expect(start.status, start.text).toBe(200)
    const url = new URL(String(start.headers["x-goog-upload-url"]))
    const target = `${url.pathname}${url.search}`
    const chunk = 256 * KiB
    let final: Awaited<ReturnType<typeof call>> | undefined
    for (let offset = 0; offset < data.length; offset += chunk) {
      const last = offset + chunk >= data.length
      const answer = await call(
        next().port,
        "POST",
        target,
        { "x-goog-upload-command": last ? "upload, finalize" : "upload", "x-goog-upload-offset": String(offset) },
        data.subarray(offset, offset + chunk)
      )
      expect(answer.status, answer.text).toBe(200)
      if (last) final = answer
    }
    const name = String((jsonOf(final!).file as { name: string }).name)
    const got = await call(next().port, "GET", `/v1beta/${name}`, { "x-goog-api-key": KEY })
    expect(got.status).toBe(200)
    expect(Number((jsonOf(got) as { sizeBytes?: string }).sizeBytes)).toBe(data.length)
  })

  it("usage written by both replicas is read whole from either", async () => {
    for (let i = 0; i < 6; i++) expect((await chat(next(), KEY, `usage ${i}`)).status).toBe(200)
    const read = async (replica: Child) => {
      const answer = await call(replica.port, "GET", "/gateway/usage", bearer(ADMIN))
      expect(answer.status, answer.text).toBe(200)
      return answer.text
    }
    // usage rows are written in batches: wait until both replicas' batches are in
    let fromA = ""
    let fromB = ""
    for (let i = 0; i < 60; i++) {
      fromA = await read(a)
      fromB = await read(b)
      if (fromA === fromB && fromA.includes("team")) break
      await sleep(100)
    }
    expect(fromA).toBe(fromB)
    expect(fromA).toContain("team")
  })

  it("SIGKILL of one replica during uploads and stores: the other keeps serving and nothing acknowledged is lost", async () => {
    const victim = a
    const survivor = b
    const acknowledged: Array<{ kind: "file"; id: string; hash: string } | { kind: "response"; id: string }> = []
    let stop = false
    const load = async (i: number) => {
      while (!stop) {
        if (i % 2 === 0) {
          const data = textBytes(64 * KiB + i)
          const form = formBody({ filename: `f${i}.txt`, type: "text/plain", data })
          const up = await call(victim.port, "POST", "/v1/files", { ...bearer(KEY), "content-type": form.contentType }, form.body).catch(() => undefined)
          if (up?.status === 200) acknowledged.push({ kind: "file", id: String(jsonOf(up).id), hash: sha256(data) })
        } else {
          const answer = await call(victim.port, "POST", "/v1/responses", { ...bearer(KEY), ...json }, JSON.stringify({ model: "mock/echo", input: `kill ${i}` })).catch(
            () => undefined
          )
          if (answer?.status === 200) acknowledged.push({ kind: "response", id: String(jsonOf(answer).id) })
        }
      }
    }
    const workers = Array.from({ length: 6 }, (_, i) => load(i))
    await sleep(700)
    await killHard(victim.child)
    stop = true
    await Promise.all(workers)
    expect(acknowledged.length).toBeGreaterThan(0)
    replicas = [survivor, survivor]
    expect((await chat(survivor, KEY)).status).toBe(200)
    for (const item of acknowledged) {
      if (item.kind === "file") {
        const content = await call(survivor.port, "GET", `/v1/files/${item.id}/content`, bearer(KEY))
        expect(content.status, `file ${item.id}`).toBe(200)
        expect(sha256(content.body)).toBe(item.hash)
      } else {
        expect((await call(survivor.port, "GET", `/v1/responses/${item.id}`, bearer(KEY))).status, `response ${item.id}`).toBe(200)
      }
    }
    // nothing half-written is visible: every listed file reads whole
    const listed = await call(survivor.port, "GET", "/v1/files?limit=1000", bearer(KEY))
    for (const file of jsonOf(listed).data as Array<{ id: string; bytes: number }>) {
      const content = await call(survivor.port, "GET", `/v1/files/${file.id}/content`, bearer(KEY))
      expect(content.body.length).toBe(file.bytes)
    }
  }, 60_000)
})
