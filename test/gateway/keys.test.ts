import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import type { RawReply } from "../support/RawHttp.js"
import { formBody, pngBytes } from "../files/uploadWire.js"
import { ADMIN, bearer, call, chat, expectProblem, gemini, get, KEYS, messages, parse, postJson, responses, sleep, type Json } from "./helpers.js"

/**
 * Runtime keys on `/gateway/admin/keys` (spec 2.5, 3, 4.5, 5.3, 5.5, 5.6, 7.1; ARCHITECTURE
 * "Admin key"): create (secret shown once), list, revoke by id; the key works at once and fails at
 * once after revocation; keys survive a restart; apps stay apart; an unfinished upload of a revoked
 * key is dropped; the secret never reaches the log or the database; every refusal.
 */

const KEY_ROUTE = "/gateway/admin/keys"
const SECRET = /^sk-gw-[0-9a-f]{48}$/
const KEY_ID = /^key_[0-9a-f]{16}$/
const MODEL = "mock/echo"

interface Created {
  readonly id: string
  readonly app: string
  readonly key: string
  readonly created_at: string
}
interface Listed {
  readonly id: string
  readonly app: string
  readonly created_at: string
}

const baseDocument = (extra: Json = {}): Json => ({
  providers: { mock: { type: "mock" } },
  adminKey: ADMIN,
  keys: [
    { key: KEYS.alpha, app: "alpha" },
    { key: KEYS.beta, app: "beta" }
  ],
  ...extra
})

/** The id the gateway gives a configured key (its digest's first 8 bytes): config keys are never listed. */
const configKeyId = (key: string) => `key_${createHash("sha256").update(key, "utf8").digest("hex").slice(0, 16)}`

const createRaw = (gw: TestGateway, body: unknown, key: string = ADMIN) => postJson(gw, KEY_ROUTE, body, bearer(key))

const create = async (gw: TestGateway, app: string): Promise<Created> => {
  const r = await createRaw(gw, { app })
  expect(r.status, r.text).toBe(201)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  const body = parse(r) as unknown as Created
  expect(Object.keys(body).sort()).toEqual(["app", "created_at", "id", "key"])
  expect(body.key).toMatch(SECRET)
  expect(body.id).toMatch(KEY_ID)
  expect(body.app).toBe(app)
  expect(Number.isNaN(Date.parse(body.created_at))).toBe(false)
  expect(Math.abs(Date.parse(body.created_at) - Date.now())).toBeLessThan(60_000)
  return body
}

const listRaw = (gw: TestGateway, key: string = ADMIN) => get(gw, KEY_ROUTE, key)

const list = async (gw: TestGateway): Promise<{ readonly data: ReadonlyArray<Listed>; readonly text: string }> => {
  const r = await listRaw(gw)
  expect(r.status, r.text).toBe(200)
  const body = parse(r) as { data: ReadonlyArray<Listed> }
  for (const entry of body.data) {
    expect(Object.keys(entry).sort()).toEqual(["app", "created_at", "id"])
    expect(entry.id).toMatch(KEY_ID)
  }
  return { data: body.data, text: r.text }
}

const revoke = (gw: TestGateway, id: string, key: string = ADMIN) => call(gw, "DELETE", `${KEY_ROUTE}/${id}`, { headers: bearer(key) })

const expectChatOk = async (gw: TestGateway, key: string, what: string) => {
  const r = await chat(gw, key, MODEL)
  expect(r.status, `${what}: ${r.text}`).toBe(200)
}

const expectOpenAi401 = (r: RawReply) => {
  expect(r.status, r.text).toBe(401)
  expect((parse(r).error as Json).code).toBe("invalid_api_key")
}

const expectGemini401 = (r: RawReply) => {
  expect(r.status, r.text).toBe(401)
  expect((parse(r).error as Json).status).toBe("UNAUTHENTICATED")
}

/** Upload a small PNG through the chat-style Files route; returns its id. */
const uploadFile = async (gw: TestGateway, key: string): Promise<string> => {
  const form = formBody({ data: pngBytes(256), filename: "pic.png", type: "image/png" })
  const r = await call(gw, "POST", "/v1/files", { headers: { ...bearer(key), "content-type": form.contentType }, body: form.body })
  expect(r.status, r.text).toBe(200)
  return parse(r).id as string
}

describe("runtime keys", () => {
  let gw: TestGateway
  beforeAll(async () => {
    // 1 MiB bodies: the in-flight budget (256 MiB) has room for the many apps made here (32 MiB allows 8)
    gw = await startGateway(baseDocument({ limits: { maxBodyBytes: 1024 * 1024 } }))
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("create: 201 with the secret once; the list shows id, app and created_at but never the secret", async () => {
    const before = await list(gw)
    expect(before.data).toEqual([])
    const created = await create(gw, "team-list")
    const other = await create(gw, "team-list")
    expect(other.id).not.toBe(created.id)
    expect(other.key).not.toBe(created.key)
    const after = await list(gw)
    expect(after.data).toEqual(
      expect.arrayContaining([
        { id: created.id, app: "team-list", created_at: created.created_at },
        { id: other.id, app: "team-list", created_at: other.created_at }
      ])
    )
    expect(after.data.length).toBe(2)
    expect(after.text).not.toContain(created.key)
    expect(after.text).not.toContain(other.key)
    expect(after.text).not.toContain("sk-gw-")
    // revoke both so later listings of this gateway are about their own keys
    for (const id of [created.id, other.id]) expect((await revoke(gw, id)).status).toBe(200)
    expect((await list(gw)).data).toEqual([])
  })

  it("works at once on chat completions, Messages, Responses and the Gemini routes (header and query)", async () => {
    const created = await create(gw, "team-use")
    await expectChatOk(gw, created.key, "chat")
    const m = await messages(gw, created.key, MODEL)
    expect(m.status, m.text).toBe(200)
    const resp = await responses(gw, created.key, MODEL)
    expect(resp.status, resp.text).toBe(200)
    const g = await gemini(gw, created.key, MODEL)
    expect(g.status, g.text).toBe(200)
    const q = await postJson(gw, `/v1beta/models/${MODEL}:generateContent?key=${created.key}`, { contents: [{ role: "user", parts: [{ text: "hi" }] }] })
    expect(q.status, q.text).toBe(200)
    const gs = await gemini(gw, created.key, MODEL, { stream: true })
    expect(gs.status, gs.text).toBe(200)
    // and reads its own app's usage
    const usage = await get(gw, "/gateway/usage", created.key)
    expect(usage.status, usage.text).toBe(200)
    expect(parse(usage).app).toBe("team-use")
    // the admin may now name the runtime app in a usage query
    const byAdmin = await get(gw, "/gateway/usage?app=team-use", ADMIN)
    expect(byAdmin.status, byAdmin.text).toBe(200)
  })

  it("revoke: the very next request with the key is 401 on every family; revoking again is key_not_found", async () => {
    const created = await create(gw, "team-revoke")
    await expectChatOk(gw, created.key, "before revoking")
    const r = await revoke(gw, created.id)
    expect(r.status, r.text).toBe(200)
    expect(parse(r)).toEqual({ id: created.id, revoked: true })
    expect(r.text).not.toContain(created.key)

    expectOpenAi401(await chat(gw, created.key, MODEL))
    const m = await messages(gw, created.key, MODEL)
    expect(m.status).toBe(401)
    expect((parse(m).error as Json).type).toBe("authentication_error")
    expectGemini401(await gemini(gw, created.key, MODEL))
    expectOpenAi401(await get(gw, "/v1/files", created.key))
    expectProblem(await get(gw, "/gateway/usage", created.key), 401, "invalid_api_key", { instance: "/gateway/usage", secrets: [created.key] })
    expect((await list(gw)).data.map((k) => k.id)).not.toContain(created.id)

    const target = `${KEY_ROUTE}/${created.id}`
    expectProblem(await revoke(gw, created.id), 404, "key_not_found", { instance: target })
    expectProblem(await revoke(gw, "key_0000000000000000"), 404, "key_not_found", { instance: `${KEY_ROUTE}/key_0000000000000000` })
    expectProblem(await revoke(gw, "nonsense"), 404, "key_not_found", { instance: `${KEY_ROUTE}/nonsense` })
  })

  it("a config key's id cannot be revoked here (config_key) and keeps working", async () => {
    for (const key of [KEYS.alpha, KEYS.beta]) {
      const id = configKeyId(key)
      const r = await revoke(gw, id)
      expectProblem(r, 409, "config_key", { instance: `${KEY_ROUTE}/${id}`, secrets: [key] })
      await expectChatOk(gw, key, "config key after refused revoke")
    }
  })

  it("an app that has a config key takes no runtime key (app_has_config_key)", async () => {
    for (const app of ["alpha", "beta"]) {
      const r = await createRaw(gw, { app })
      expectProblem(r, 409, "app_has_config_key", { instance: KEY_ROUTE, param: "app" })
    }
    expect((await list(gw)).data.map((k) => k.app)).not.toContain("alpha")
  })

  it("invalid_app: uppercase, other characters, default, empty, longer than 64", async () => {
    const bad = ["default", "Team-x", "TEAM", "team_x", "team.x", "team x", "tëam", "", "a".repeat(65), "team/x"]
    for (const app of bad) {
      expectProblem(await createRaw(gw, { app }), 400, "invalid_app", { instance: KEY_ROUTE, param: "app" })
    }
    expect((await list(gw)).data.map((k) => k.app)).not.toEqual(expect.arrayContaining(bad))
    // 64 characters, digits and - are fine
    await create(gw, "a".repeat(64))
    await create(gw, "team-42")
  })

  it("the body: wrong or missing app field, not JSON, not application/json", async () => {
    for (const body of [{}, { app: 5 }, { app: null }]) {
      expectProblem(await createRaw(gw, body), 400, "invalid_request_error", { instance: KEY_ROUTE, param: "app" })
    }
    for (const body of [[{ app: "x" }], "\"team\"", "7"]) {
      expectProblem(await createRaw(gw, body), 400, "invalid_request_error", { instance: KEY_ROUTE })
    }
    expectProblem(await createRaw(gw, "{\"app\": \"team-json\""), 400, "invalid_json", { instance: KEY_ROUTE })
    expectProblem(await createRaw(gw, ""), 400, "invalid_request", { instance: KEY_ROUTE })
    for (const type of ["text/plain", "application/x-www-form-urlencoded"]) {
      const r = await call(gw, "POST", KEY_ROUTE, { headers: { ...bearer(ADMIN), "content-type": type }, body: JSON.stringify({ app: "team-type" }) })
      expectProblem(r, 415, "unsupported_media_type", { instance: KEY_ROUTE })
    }
    const none = await call(gw, "POST", KEY_ROUTE, { headers: bearer(ADMIN), body: JSON.stringify({ app: "team-type" }) })
    expectProblem(none, 415, "unsupported_media_type", { instance: KEY_ROUTE })
    expect((await list(gw)).data.map((k) => k.app)).not.toEqual(expect.arrayContaining(["team-json", "team-type"]))
  })

  it("only the admin manages keys: none or a wrong key is invalid_api_key, an app key (config or runtime) admin_key_required", async () => {
    const runtime = await create(gw, "team-auth")
    const wrong = "sk-wrong-0123456789"
    const attempts: ReadonlyArray<readonly [string, string, string | undefined]> = [
      ["GET", KEY_ROUTE, undefined],
      ["POST", KEY_ROUTE, JSON.stringify({ app: "team-sneaky" })],
      ["DELETE", `${KEY_ROUTE}/${runtime.id}`, undefined]
    ]
    for (const [method, target, body] of attempts) {
      const send = (headers: Record<string, string>) =>
        call(gw, method, target, { headers: { "content-type": "application/json", ...headers }, ...(body !== undefined ? { body } : {}) })
      expectProblem(await send({}), 401, "invalid_api_key", { instance: target })
      expectProblem(await send(bearer(wrong)), 401, "invalid_api_key", { instance: target, secrets: [wrong] })
      // the admin key sent the way model routes also read keys is not the admin
      expectProblem(await send({ "x-api-key": ADMIN }), 401, "invalid_api_key", { instance: target, secrets: [ADMIN] })
      expectProblem(await send(bearer(KEYS.alpha)), 403, "admin_key_required", { instance: target, secrets: [KEYS.alpha] })
      expectProblem(await send(bearer(runtime.key)), 403, "admin_key_required", { instance: target, secrets: [runtime.key] })
    }
    // nothing happened
    await expectChatOk(gw, runtime.key, "runtime key after refused revoke")
    expect((await list(gw)).data.map((k) => k.app)).not.toContain("team-sneaky")
  })

  it("method_not_allowed and not_found around the admin routes", async () => {
    for (const method of ["PUT", "DELETE", "PATCH"]) {
      const r = await call(gw, method, KEY_ROUTE, { headers: bearer(ADMIN) })
      expectProblem(r, 405, "method_not_allowed", { instance: KEY_ROUTE, param: "any" })
      expect(r.headers.allow?.split(", ").sort()).toEqual(["GET", "HEAD", "POST"])
    }
    for (const method of ["POST", "PUT"]) {
      const target = `${KEY_ROUTE}/key_0000000000000000`
      const r = await call(gw, method, target, { headers: bearer(ADMIN) })
      expectProblem(r, 405, "method_not_allowed", { instance: target, param: "any" })
      expect(r.headers.allow?.split(", ").sort()).toEqual(["DELETE", "GET", "HEAD", "PATCH"])
    }
    for (const target of ["/gateway/admin", "/gateway/admin/keys/a/b", "/gateway/admin/keys/key.1", "/gateway/admin/users"]) {
      expectProblem(await call(gw, "DELETE", target, { headers: bearer(ADMIN) }), 404, "not_found", { instance: target })
    }
  })

  it("apps stay apart: a runtime key reads no other app's files, responses or usage", async () => {
    const x = await create(gw, "team-x")
    const y = await create(gw, "team-y")
    const fileOfAlpha = await uploadFile(gw, KEYS.alpha)
    const fileOfY = await uploadFile(gw, y.key)
    const stored = await responses(gw, KEYS.alpha, MODEL)
    expect(stored.status, stored.text).toBe(200)
    const responseOfAlpha = parse(stored).id as string
    const storedY = await responses(gw, y.key, MODEL)
    const responseOfY = parse(storedY).id as string

    for (const file of [fileOfAlpha, fileOfY]) {
      const r = await get(gw, `/v1/files/${file}`, x.key)
      expect(r.status, r.text).toBe(404)
      expect((parse(r).error as Json).message).toBe(`No such File object: ${file}`)
      expect((await get(gw, `/v1/files/${file}/content`, x.key)).status).toBe(404)
      expect((await call(gw, "DELETE", `/v1/files/${file}`, { headers: bearer(x.key) })).status).toBe(404)
    }
    const listed = await get(gw, "/v1/files", x.key)
    expect(listed.status).toBe(200)
    expect(parse(listed).data).toEqual([])
    for (const id of [responseOfAlpha, responseOfY]) {
      expect((await get(gw, `/v1/responses/${id}`, x.key)).status).toBe(404)
      const chained = await responses(gw, x.key, MODEL, { previous_response_id: id })
      expect(chained.status).toBe(400)
      expect((parse(chained).error as Json).code).toBe("previous_response_not_found")
    }
    for (const other of ["alpha", "team-y"]) {
      const target = `/gateway/usage?app=${other}`
      expectProblem(await get(gw, target, x.key), 403, "app_forbidden", { instance: target, param: "app", secrets: [x.key] })
    }
    // the owners still read theirs
    expect((await get(gw, `/v1/files/${fileOfY}`, y.key)).status).toBe(200)
    expect((await get(gw, `/v1/responses/${responseOfY}`, y.key)).status).toBe(200)
    expect((await get(gw, `/v1/files/${fileOfAlpha}`, KEYS.alpha)).status).toBe(200)
  })

  it("a revoked key's unfinished resumable upload is dropped: its next keyless chunk is 401", async () => {
    const created = await create(gw, "team-upload")
    const png = pngBytes(200)
    const start = await call(gw, "POST", "/upload/v1beta/files", {
      headers: {
        "x-goog-api-key": created.key,
        "x-goog-upload-protocol": "resumable",
        "x-goog-upload-command": "start",
        "x-goog-upload-header-content-length": String(png.length),
        "x-goog-upload-header-content-type": "image/png",
        "content-type": "application/json"
      },
      body: JSON.stringify({ file: { display_name: "pic.png" } })
    })
    expect(start.status, start.text).toBe(200)
    const url = new URL(String(start.headers["x-goog-upload-url"]))
    const target = `${url.pathname}${url.search}`
    const chunk = (offset: number, bytes: Buffer, command: string) =>
      call(gw, "POST", target, { headers: { "x-goog-upload-command": command, "x-goog-upload-offset": String(offset), "content-type": "application/octet-stream" }, body: bytes })
    // the upload URL is the credential while the key lives
    const first = await chunk(0, png.subarray(0, 100), "upload")
    expect(first.status, first.text).toBe(200)
    expect(first.headers["x-goog-upload-status"]).toBe("active")

    expect((await revoke(gw, created.id)).status).toBe(200)
    const rest = await chunk(100, png.subarray(100), "upload, finalize")
    expectGemini401(rest)
    // with a live key of another app the upload is simply not there
    const withKey = await call(gw, "POST", target, {
      headers: { "x-goog-api-key": KEYS.alpha, "x-goog-upload-command": "upload, finalize", "x-goog-upload-offset": "100" },
      body: png.subarray(100)
    })
    expect(withKey.status, withKey.text).toBe(404)
  })
})

describe("body budget for a new app", () => {
  let gw: TestGateway
  beforeAll(async () => {
    // two config apps of 1000 bytes each: room for exactly one more app
    gw = await startGateway(baseDocument({ limits: { maxBodyBytes: 1000, maxBodyBytesInFlight: 3000 } }))
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("refuses a key for a new app when maxBodyBytesInFlight cannot hold one largest body per app; nothing is created", async () => {
    const gamma = await create(gw, "gamma")
    for (const app of ["delta", "epsilon"]) {
      expectProblem(await createRaw(gw, { app }), 409, "body_budget_insufficient", { instance: KEY_ROUTE })
    }
    const listed = await list(gw)
    expect(listed.data.map((k) => k.app)).toEqual(["gamma"])
    // a second key of an app that already has one needs no more room
    const second = await create(gw, "gamma")
    expect(second.app).toBe("gamma")
    await expectChatOk(gw, gamma.key, "gamma")
    // revoking gamma's keys frees its share
    for (const id of [gamma.id, second.id]) expect((await revoke(gw, id)).status).toBe(200)
    await create(gw, "delta")
  })
})

describe("runtime keys across a restart", () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-keys-"))
  const gateways: Array<TestGateway> = []
  const start = async () => {
    const gw = await startGateway(baseDocument(), { dataDir })
    gateways.push(gw)
    return gw
  }
  afterAll(async () => {
    for (const gw of gateways) await gw.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  it("live keys keep working, revoked ones stay revoked, and the database holds no secret", async () => {
    const first = await start()
    const kept = await create(first, "team-kept")
    const gone = await create(first, "team-gone")
    expect((await revoke(first, gone.id)).status).toBe(200)
    await expectChatOk(first, kept.key, "kept before restart")
    await first.close()

    // only digests were written
    for (const name of fs.readdirSync(dataDir).filter((f) => f.startsWith("gateway.db"))) {
      const bytes = fs.readFileSync(path.join(dataDir, name)).toString("latin1")
      expect(bytes, name).not.toContain(kept.key)
      expect(bytes, name).not.toContain(gone.key)
      expect(bytes, name).not.toContain(kept.key.slice(6))
    }

    const second = await start()
    const listed = await list(second)
    expect(listed.data).toEqual([{ id: kept.id, app: "team-kept", created_at: kept.created_at }])
    await expectChatOk(second, kept.key, "kept after restart")
    expect((await gemini(second, kept.key, MODEL)).status).toBe(200)
    expectOpenAi401(await chat(second, gone.key, MODEL))
    expectGemini401(await gemini(second, gone.key, MODEL))
    expectProblem(await revoke(second, gone.id), 404, "key_not_found", { instance: `${KEY_ROUTE}/${gone.id}` })
    // revoking after the restart holds across the next one too
    expect((await revoke(second, kept.id)).status).toBe(200)
    await second.close()
    const third = await start()
    expect((await list(third)).data).toEqual([])
    expectOpenAi401(await chat(third, kept.key, MODEL))
    await third.close()
  })
})

describe("the secret never reaches the access log", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(baseDocument({ accessLog: true }))
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("create, use (header and query), list, revoke and a refused use leave log lines without the secret or the admin key", async () => {
    const written: Array<string> = []
    const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array): boolean => {
      written.push(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"))
      return true
    })
    let created: Created
    try {
      created = await create(gw, "team-log")
      await expectChatOk(gw, created.key, "logged chat")
      expect((await postJson(gw, `/v1beta/models/${MODEL}:generateContent?key=${created.key}`, { contents: [{ role: "user", parts: [{ text: "hi" }] }] })).status).toBe(200)
      expect((await get(gw, "/gateway/usage", created.key)).status).toBe(200)
      await list(gw)
      expect((await revoke(gw, created.id)).status).toBe(200)
      expectOpenAi401(await chat(gw, created.key, MODEL))
      expect((await createRaw(gw, { app: "Bad App" })).status).toBe(400)
      await sleep(50)
    } finally {
      spy.mockRestore()
    }
    const text = written.join("")
    const requests = text
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as Json)
      .filter((l) => l.event === "request")
    expect(requests.map((l) => l.route)).toEqual(
      expect.arrayContaining(["gateway.admin.keys.create", "gateway.admin.keys.list", "gateway.admin.keys.revoke", "chat.completions", "gateway.usage"])
    )
    expect(requests.length).toBeGreaterThanOrEqual(8)
    expect(text).not.toContain(created.key)
    expect(text).not.toContain(created.key.slice(6))
    expect(text).not.toContain("sk-gw-")
    expect(text).not.toContain(ADMIN)
  })
})
