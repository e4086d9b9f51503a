import * as http from "node:http"
import { setTimeout as sleep } from "node:timers/promises"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { rawCall, type RawCallOptions, type RawReply } from "../support/RawHttp.js"

/**
 * The HTTP edge over real sockets: Host and Origin checks, auth per family, 404 vs 405, the
 * concurrency cap, the request deadline, probes, request ids and the access log.
 */

type Json = Record<string, unknown>

type Reply = RawReply

/** One request on a fresh connection. */
const call = (gw: TestGateway, method: string, path: string, options: RawCallOptions = {}): Promise<Reply> => rawCall(gw.port, method, path, options)

const parse = (r: Reply): Json => JSON.parse(r.text) as Json
const errorOf = (r: Reply): Json => parse(r).error as Json

const KEY = "sk-test-0123456789"
const bearer = (key: string = KEY) => ({ authorization: `Bearer ${key}` })
const jsonType = { "content-type": "application/json" }

const chatBody = (content: string, extra: Json = {}) => JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content }], ...extra })

const chat = (gw: TestGateway, content: string, headers: Readonly<Record<string, string>> = {}, extra: Json = {}) =>
  call(gw, "POST", "/v1/chat/completions", { headers: { ...jsonType, ...headers }, body: chatBody(content, extra) })

/** A good model request still succeeds: the gateway keeps serving after a refusal. */
const expectServing = async (gw: TestGateway, headers: Readonly<Record<string, string>> = {}) => {
  const r = await chat(gw, "still serving", headers)
  expect(r.status).toBe(200)
  expect((((parse(r).choices as Array<Json>)[0].message) as Json).content).toBe("still serving")
}

/** Wait (a generous backstop) until the gateway counts `n` model requests in flight. */
const untilModelRequestsInFlight = async (gw: TestGateway, n: number) => {
  let last = ""
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(10)) {
    last = (await call(gw, "GET", "/gateway/metrics")).text
    if (last.split("\n").includes(`gateway_model_requests_in_flight ${n}`)) return
  }
  throw new Error(`never ${n} model requests in flight:\n${last.split("\n").filter((l) => l.includes("in_flight")).join("\n")}`)
}

/** The gateway serves again once a held slot is given back (429 until then; a generous backstop). */
const untilServing = async (gw: TestGateway) => {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20)) {
    const r = await chat(gw, "still serving")
    if (r.status !== 429) break
  }
  await expectServing(gw)
}

/** The request id header is present (and on Messages paths, `request-id` too, with the same value). */
const expectIds = (r: Reply, messages = false) => {
  const id = r.headers["x-gateway-request-id"]
  expect(typeof id).toBe("string")
  expect(id).toMatch(/^req_[0-9a-f]+$/)
  if (messages) expect(r.headers["request-id"]).toBe(id)
}

const expectOpenAi = (r: Reply, status: number, type: string, code: string) => {
  expect(r.status).toBe(status)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  const body = parse(r)
  expect(Object.keys(body)).toEqual(["error"])
  const e = errorOf(r)
  expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"])
  expect(e.type).toBe(type)
  expect(e.code).toBe(code)
  expect(typeof e.message).toBe("string")
  expectIds(r)
}

const expectMessages = (r: Reply, status: number, type: string) => {
  expect(r.status).toBe(status)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  const body = parse(r)
  expect(Object.keys(body).sort()).toEqual(["error", "type"])
  expect(body.type).toBe("error")
  const e = errorOf(r)
  expect(Object.keys(e).sort()).toEqual(["message", "type"])
  expect(e.type).toBe(type)
  expect(typeof e.message).toBe("string")
  expectIds(r, true)
}

const expectGemini = (r: Reply, status: number, name: string) => {
  expect(r.status).toBe(status)
  expect(r.headers["content-type"]).toMatch(/^application\/json/)
  const body = parse(r)
  expect(Object.keys(body)).toEqual(["error"])
  const e = errorOf(r)
  expect(e.code).toBe(status)
  expect(e.status).toBe(name)
  expect(typeof e.message).toBe("string")
  expectIds(r)
}

const expectProblem = (r: Reply, status: number, code: string, instance: string) => {
  expect(r.status).toBe(status)
  expect(r.headers["content-type"]).toMatch(/^application\/problem\+json/)
  const body = parse(r)
  for (const field of ["type", "title", "status", "detail", "instance", "code", "requestId"]) expect(body).toHaveProperty(field)
  expect(body.status).toBe(status)
  expect(body.code).toBe(code)
  expect(body.instance).toBe(instance)
  expect(typeof body.title).toBe("string")
  expect(typeof body.type).toBe("string")
  expect(typeof body.detail).toBe("string")
  expectIds(r)
  expect(body.requestId).toBe(r.headers["x-gateway-request-id"])
}

const mock = { providers: { mock: { type: "mock" } } }

/** The paths of each family, used where a check must hold on every family. */
const familyPaths = {
  openai: { method: "POST", path: "/v1/chat/completions" },
  messages: { method: "POST", path: "/v1/messages" },
  gemini: { method: "POST", path: "/v1beta/models/mock-echo:generateContent" },
  upload: { method: "POST", path: "/upload/v1beta/files" },
  gateway: { method: "GET", path: "/healthz" }
} as const

describe("edge on a keyless loopback gateway", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(mock)
  })
  afterAll(async () => {
    await gw?.close()
  })

  describe("Host check (invalid_host)", () => {
    const wrongHosts = () => ["evil.example", `evil.example:${gw.port}`, `127.0.0.1:${gw.port + 1 === 65536 ? 1 : gw.port + 1}`, "127.0.0.1", "localhost"]

    it("refuses a wrong Host on OpenAI paths", async () => {
      for (const host of wrongHosts()) {
        const r = await call(gw, "POST", familyPaths.openai.path, { headers: { host, ...jsonType }, body: chatBody("hi") })
        expectOpenAi(r, 400, "invalid_request_error", "invalid_host")
      }
      await expectServing(gw)
    })

    it("refuses a wrong Host on Messages paths", async () => {
      const r = await call(gw, "POST", familyPaths.messages.path, { headers: { host: "evil.example", ...jsonType }, body: "{}" })
      expectMessages(r, 400, "invalid_request_error")
      const models = await call(gw, "GET", "/v1/models", { headers: { host: "evil.example", "anthropic-version": "2023-06-01" } })
      expectMessages(models, 400, "invalid_request_error")
      await expectServing(gw)
    })

    it("refuses a wrong Host on Gemini paths", async () => {
      for (const p of [familyPaths.gemini, familyPaths.upload]) {
        const r = await call(gw, p.method, p.path, { headers: { host: "evil.example", ...jsonType }, body: "{}" })
        expectGemini(r, 400, "INVALID_ARGUMENT")
      }
      await expectServing(gw)
    })

    it("refuses a wrong Host on own routes and probes with problem details", async () => {
      const r = await call(gw, "GET", "/healthz", { headers: { host: "evil.example" } })
      expectProblem(r, 400, "invalid_host", "/healthz")
      const q = await call(gw, "GET", "/gateway/ready?x=1", { headers: { host: `rebind.example:${gw.port}` } })
      expectProblem(q, 400, "invalid_host", "/gateway/ready?x=1")
      await expectServing(gw)
    })

    it("accepts localhost:PORT, 127.0.0.1:PORT and [::1]:PORT on a loopback listener, in any case", async () => {
      for (const host of [`localhost:${gw.port}`, `127.0.0.1:${gw.port}`, `[::1]:${gw.port}`, `LocalHost:${gw.port}`]) {
        const r = await chat(gw, "host ok", { host })
        expect(r.status, host).toBe(200)
        const probe = await call(gw, "GET", "/healthz", { headers: { host } })
        expect(probe.status, host).toBe(200)
      }
    })
  })

  describe("Origin on a keyless endpoint", () => {
    const evil = { origin: "http://evil.example" }

    it("refuses a cross-site Origin on an OpenAI model route (403 cross_origin_forbidden)", async () => {
      const r = await chat(gw, "hi", evil)
      expectOpenAi(r, 403, "permission_error", "cross_origin_forbidden")
      const models = await call(gw, "GET", "/v1/models", { headers: evil })
      expectOpenAi(models, 403, "permission_error", "cross_origin_forbidden")
      await expectServing(gw)
    })

    it("refuses a cross-site Origin on Messages paths", async () => {
      const r = await call(gw, "POST", "/v1/messages", { headers: { ...evil, ...jsonType }, body: "{}" })
      expectMessages(r, 403, "permission_error")
      const models = await call(gw, "GET", "/v1/models", { headers: { ...evil, "anthropic-version": "2023-06-01" } })
      expectMessages(models, 403, "permission_error")
      await expectServing(gw)
    })

    it("refuses a cross-site Origin on Gemini paths", async () => {
      for (const p of [familyPaths.gemini, familyPaths.upload]) {
        const r = await call(gw, p.method, p.path, { headers: { ...evil, ...jsonType }, body: "{}" })
        expectGemini(r, 403, "PERMISSION_DENIED")
      }
      await expectServing(gw)
    })

    it("refuses an https origin on another host and an origin naming another port", async () => {
      for (const origin of ["https://evil.example", `http://127.0.0.1:${gw.port + 1}`, `http://localhost:${gw.port}`]) {
        const r = await chat(gw, "hi", { origin })
        expectOpenAi(r, 403, "permission_error", "cross_origin_forbidden")
      }
      await expectServing(gw)
    })

    it("refuses the opaque origin `null` (sandboxed frames, file: pages are browsers too)", async () => {
      const r = await chat(gw, "hi", { origin: "null" })
      expectOpenAi(r, 403, "permission_error", "cross_origin_forbidden")
      await expectServing(gw)
    })

    it("accepts a same-origin Origin", async () => {
      const r = await chat(gw, "same origin", { origin: `http://127.0.0.1:${gw.port}` })
      expect(r.status).toBe(200)
      const viaLocalhost = await chat(gw, "same origin", { origin: `http://localhost:${gw.port}`, host: `localhost:${gw.port}` })
      expect(viaLocalhost.status).toBe(200)
    })

    it("probes answer whatever the Origin", async () => {
      const r = await call(gw, "GET", "/healthz", { headers: evil })
      expect(r.status).toBe(200)
    })
  })

  describe("404 vs 405", () => {
    it("GET /v1/chat/completions is 405 with Allow: POST in the OpenAI envelope", async () => {
      const r = await call(gw, "GET", "/v1/chat/completions")
      expectOpenAi(r, 405, "invalid_request_error", "method_not_allowed")
      expect(r.headers["allow"]).toBe("POST")
      await expectServing(gw)
    })

    it("an unknown /v1 path is 404 in the OpenAI envelope", async () => {
      const r = await call(gw, "GET", "/v1/nope")
      expectOpenAi(r, 404, "invalid_request_error", "not_found")
      const post = await call(gw, "POST", "/v1/nope", { headers: jsonType, body: "{}" })
      expectOpenAi(post, 404, "invalid_request_error", "not_found")
      await expectServing(gw)
    })

    it("an unknown path outside the families is 404 problem details", async () => {
      const r = await call(gw, "GET", "/nope")
      expectProblem(r, 404, "not_found", "/nope")
      const g = await call(gw, "GET", "/gateway/nope?a=b")
      expectProblem(g, 404, "not_found", "/gateway/nope?a=b")
      await expectServing(gw)
    })

    it("DELETE /healthz is 405 problem details with Allow: GET, HEAD", async () => {
      const r = await call(gw, "DELETE", "/healthz")
      expectProblem(r, 405, "method_not_allowed", "/healthz")
      expect(r.headers["allow"]).toBe("GET, HEAD")
      await expectServing(gw)
    })

    it("unknown Messages and Gemini paths are 404 in their envelopes", async () => {
      expectMessages(await call(gw, "GET", "/v1/messages/nope"), 404, "not_found_error")
      expectGemini(await call(gw, "GET", "/v1beta/nope"), 404, "NOT_FOUND")
      expectGemini(await call(gw, "POST", "/upload/v1beta/nope", { headers: jsonType, body: "{}" }), 404, "NOT_FOUND")
      await expectServing(gw)
    })
  })

  describe("request target", () => {
    it("a target with invalid percent-encoding is 400 invalid_request_target in the family's envelope", async () => {
      expectOpenAi(await call(gw, "GET", "/v1/models%E0%A4%A"), 400, "invalid_request_error", "invalid_request_target")
      expectProblem(await call(gw, "GET", "/gateway/%E0%A4%A"), 400, "invalid_request_target", "/gateway/%E0%A4%A")
      await expectServing(gw)
    })

    it("the asterisk form is 400 invalid_request_target in problem details", async () => {
      const r = await call(gw, "OPTIONS", "*")
      expectProblem(r, 400, "invalid_request_target", "*")
      await expectServing(gw)
    })

    it("an absolute-form target is served as its path (RFC 9112)", async () => {
      const r = await call(gw, "GET", `http://127.0.0.1:${gw.port}/healthz`)
      expect(r.status).toBe(200)
      expect(parse(r)).toEqual({ ok: true })
    })

    it("a query string does not change the route", async () => {
      expect((await call(gw, "GET", "/healthz?probe=1")).status).toBe(200)
      const r = await call(gw, "POST", "/v1/chat/completions?x=1", { headers: jsonType, body: chatBody("with query") })
      expect(r.status).toBe(200)
    })
  })

  describe("request ids", () => {
    it("every response carries x-gateway-request-id; Messages-family responses also request-id", async () => {
      const replies: Array<Reply> = []
      const ok = await chat(gw, "ids")
      expectIds(ok)
      replies.push(ok)
      const streamed = await chat(gw, "ids", {}, { stream: true })
      expect(streamed.status).toBe(200)
      expect(streamed.headers["content-type"]).toMatch(/^text\/event-stream/)
      expectIds(streamed)
      replies.push(streamed)
      for (const path of ["/healthz", "/readyz", "/gateway/health", "/gateway/ready", "/", "/v1/models", "/nope", "/v1/nope", "/v1beta/nope"]) {
        const r = await call(gw, "GET", path)
        expectIds(r)
        expect(r.headers["request-id"]).toBeUndefined()
        replies.push(r)
      }
      for (const [path, headers] of [
        ["/v1/messages", {}],
        ["/v1/messages/count_tokens", {}],
        ["/v1/models", { "anthropic-version": "2023-06-01" }],
        ["/v1/models", { "messages-version": "2023-06-01" }],
        ["/v1/models", { "anthropic-beta": "x" }],
        ["/v1/models", { "messages-beta": "x" }]
      ] as const) {
        const r = await call(gw, "GET", path, { headers })
        expectIds(r, true)
        replies.push(r)
      }
      const ids = replies.map((r) => r.headers["x-gateway-request-id"])
      expect(new Set(ids).size).toBe(ids.length)
    })

    it("/v1/models and /v1/files switch to the Messages envelope on its version headers", async () => {
      expectOpenAi(await call(gw, "GET", "/v1/files", { headers: { origin: "http://evil.example" } }), 403, "permission_error", "cross_origin_forbidden")
      for (const h of ["anthropic-version", "messages-version", "anthropic-beta", "messages-beta"]) {
        expectMessages(await call(gw, "GET", "/v1/files", { headers: { origin: "http://evil.example", [h]: "x" } }), 403, "permission_error")
        expectMessages(await call(gw, "GET", "/v1/models", { headers: { origin: "http://evil.example", [h]: "x" } }), 403, "permission_error")
      }
    })
  })
})

describe("edge with keys configured", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, keys: [{ key: KEY, app: "a" }] })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("does not refuse a cross-site Origin when a key is presented", async () => {
    const r = await chat(gw, "cors ok", { ...bearer(), origin: "http://evil.example" })
    expect(r.status).toBe(200)
    // without a key the refusal is about the key, not the Origin
    expectOpenAi(await chat(gw, "hi", { origin: "http://evil.example" }), 401, "authentication_error", "invalid_api_key")
  })

  it("checks the Host before the key", async () => {
    expectOpenAi(await chat(gw, "hi", { host: "evil.example" }), 400, "invalid_request_error", "invalid_host")
    expectOpenAi(await chat(gw, "hi", { ...bearer(), host: "evil.example" }), 400, "invalid_request_error", "invalid_host")
    expectGemini(await call(gw, "GET", "/v1beta/models", { headers: { host: "evil.example" } }), 400, "INVALID_ARGUMENT")
    expectMessages(await call(gw, "GET", "/v1/messages", { headers: { host: "evil.example" } }), 400, "invalid_request_error")
    await expectServing(gw, bearer())
  })

  describe("OpenAI routes read only Bearer", () => {
    it("Bearer passes", async () => {
      await expectServing(gw, bearer())
      const models = await call(gw, "GET", "/v1/models", { headers: bearer() })
      expect(models.status).toBe(200)
    })

    it("x-api-key alone is 401", async () => {
      const r = await chat(gw, "hi", { "x-api-key": KEY })
      expectOpenAi(r, 401, "authentication_error", "invalid_api_key")
      await expectServing(gw, bearer())
    })

    it("x-goog-api-key, x-genai-api-key and ?key= are not read", async () => {
      expectOpenAi(await chat(gw, "hi", { "x-goog-api-key": KEY }), 401, "authentication_error", "invalid_api_key")
      expectOpenAi(await chat(gw, "hi", { "x-genai-api-key": KEY }), 401, "authentication_error", "invalid_api_key")
      const q = await call(gw, "POST", `/v1/chat/completions?key=${KEY}`, { headers: jsonType, body: chatBody("hi") })
      expectOpenAi(q, 401, "authentication_error", "invalid_api_key")
      await expectServing(gw, bearer())
    })

    it("no key, a wrong key and a non-Bearer scheme are 401", async () => {
      expectOpenAi(await chat(gw, "hi"), 401, "authentication_error", "invalid_api_key")
      expectOpenAi(await chat(gw, "hi", bearer("sk-wrong-0123456789")), 401, "authentication_error", "invalid_api_key")
      expectOpenAi(await chat(gw, "hi", { authorization: `Basic ${KEY}` }), 401, "authentication_error", "invalid_api_key")
      await expectServing(gw, bearer())
    })

    it("401 comes before 404 and 405", async () => {
      expectOpenAi(await call(gw, "GET", "/v1/nope"), 401, "authentication_error", "invalid_api_key")
      expectOpenAi(await call(gw, "GET", "/v1/chat/completions"), 401, "authentication_error", "invalid_api_key")
      expectOpenAi(await call(gw, "GET", "/v1/nope", { headers: bearer() }), 404, "invalid_request_error", "not_found")
      await expectServing(gw, bearer())
    })
  })

  describe("Messages paths read Bearer, then x-api-key", () => {
    it("no key is 401 authentication_error", async () => {
      const r = await call(gw, "POST", "/v1/messages", { headers: jsonType, body: "{}" })
      expectMessages(r, 401, "authentication_error")
      const wrong = await call(gw, "POST", "/v1/messages", { headers: { ...jsonType, "x-api-key": "sk-wrong-0123456789" }, body: "{}" })
      expectMessages(wrong, 401, "authentication_error")
      await expectServing(gw, bearer())
    })

    // auth passed when the body is what gets refused (400: `{}` lacks model, max_tokens, messages)
    it("x-api-key alone passes auth", async () => {
      const r = await call(gw, "POST", "/v1/messages", { headers: { ...jsonType, "x-api-key": KEY }, body: "{}" })
      expectMessages(r, 400, "invalid_request_error")
    })

    it("Bearer alone passes auth", async () => {
      const r = await call(gw, "POST", "/v1/messages", { headers: { ...jsonType, ...bearer() }, body: "{}" })
      expectMessages(r, 400, "invalid_request_error")
    })

    it("a wrong Bearer with the right x-api-key passes auth", async () => {
      const r = await call(gw, "POST", "/v1/messages", {
        headers: { ...jsonType, ...bearer("sk-wrong-0123456789"), "x-api-key": KEY },
        body: "{}"
      })
      expectMessages(r, 400, "invalid_request_error")
      await expectServing(gw, bearer())
    })

    it("/v1/models with a version header is Messages-shaped: x-api-key is read, and 401 is a Messages error", async () => {
      const none = await call(gw, "GET", "/v1/models", { headers: { "anthropic-version": "2023-06-01" } })
      expectMessages(none, 401, "authentication_error")
      const ok = await call(gw, "GET", "/v1/models", { headers: { "anthropic-version": "2023-06-01", "x-api-key": KEY } })
      expect(ok.status).toBe(200)
      expectIds(ok, true)
      const files = await call(gw, "GET", "/v1/files", { headers: { "messages-beta": "files-api" } })
      expectMessages(files, 401, "authentication_error")
      const openaiFiles = await call(gw, "GET", "/v1/files")
      expectOpenAi(openaiFiles, 401, "authentication_error", "invalid_api_key")
    })
  })

  describe("Gemini paths read Bearer, x-goog-api-key, x-genai-api-key, ?key=", () => {
    const path = "/v1beta/models/mock%2Fecho:generateContent"
    const body = JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }] })

    it("each spelling passes auth", async () => {
      const spellings: ReadonlyArray<Readonly<Record<string, string>>> = [bearer(), { "x-goog-api-key": KEY }, { "x-genai-api-key": KEY }]
      for (const headers of spellings) {
        const r = await call(gw, "POST", path, { headers: { ...jsonType, ...headers }, body })
        expect(r.status, r.text).toBe(200)
        expect(JSON.parse(r.text).candidates[0].content.parts[0].text).toBe("hi")
      }
      const q = await call(gw, "POST", `${path}?key=${KEY}`, { headers: jsonType, body })
      expect(q.status).toBe(200)
      // past authentication: refused for its missing upload protocol headers, not for its key
      const upload = await call(gw, "POST", "/upload/v1beta/files", { headers: { ...jsonType, "x-goog-api-key": KEY }, body: "{}" })
      expectGemini(upload, 400, "INVALID_ARGUMENT")
      await expectServing(gw, bearer())
    })

    it("no key or a wrong key is 401 UNAUTHENTICATED, before 404", async () => {
      expectGemini(await call(gw, "POST", path, { headers: jsonType, body }), 401, "UNAUTHENTICATED")
      expectGemini(await call(gw, "POST", path, { headers: { ...jsonType, "x-goog-api-key": "sk-wrong-0123456789" }, body }), 401, "UNAUTHENTICATED")
      expectGemini(await call(gw, "POST", `${path}?key=sk-wrong-0123456789`, { headers: jsonType, body }), 401, "UNAUTHENTICATED")
      expectGemini(await call(gw, "GET", "/v1beta/nope"), 401, "UNAUTHENTICATED")
      expectGemini(await call(gw, "POST", "/upload/v1beta/files", { headers: jsonType, body: "{}" }), 401, "UNAUTHENTICATED")
      // the first key present is the one read: a wrong bearer is not rescued by a right x-goog-api-key
      expectGemini(await call(gw, "POST", path, { headers: { ...jsonType, ...bearer("sk-wrong-0123456789"), "x-goog-api-key": KEY }, body }), 401, "UNAUTHENTICATED")
      // x-api-key is a Messages spelling, not a Gemini one
      expectGemini(await call(gw, "POST", path, { headers: { ...jsonType, "x-api-key": KEY }, body }), 401, "UNAUTHENTICATED")
      await expectServing(gw, bearer())
    })
  })

  describe("probes need no key", () => {
    it("/healthz {ok:true}", async () => {
      const r = await call(gw, "GET", "/healthz")
      expect(r.status).toBe(200)
      expect(parse(r)).toMatchObject({ ok: true })
      expectIds(r)
    })

    it("/readyz {ready:true}", async () => {
      const r = await call(gw, "GET", "/readyz")
      expect(r.status).toBe(200)
      expect(parse(r)).toMatchObject({ ready: true })
    })

    it("/gateway/health and /gateway/ready", async () => {
      const h = await call(gw, "GET", "/gateway/health")
      expect(h.status).toBe(200)
      expect(h.headers["content-type"]).toMatch(/^application\/json/)
      const r = await call(gw, "GET", "/gateway/ready")
      expect(r.status).toBe(200)
      expect(r.headers["content-type"]).toMatch(/^application\/json/)
    })

    it("HEAD /healthz answers 200", async () => {
      const r = await call(gw, "HEAD", "/healthz")
      expect(r.status).toBe(200)
      expect(r.text).toBe("")
    })

    it("/ lists the routes as JSON by default", async () => {
      const r = await call(gw, "GET", "/")
      expect(r.status).toBe(200)
      expect(r.headers["content-type"]).toMatch(/^application\/json/)
      const routes = parse(r).routes as Array<Json>
      expect(Array.isArray(routes)).toBe(true)
      for (const [method, path] of [
        ["POST", "/v1/chat/completions"],
        ["POST", "/v1/completions"],
        ["GET", "/v1/models"],
        ["GET", "/healthz"],
        ["GET", "/readyz"],
        ["GET", "/gateway/health"],
        ["GET", "/gateway/ready"]
      ]) {
        expect(routes).toContainEqual(expect.objectContaining({ method, path }))
      }
    })

    it("/ is an HTML page with Accept: text/html", async () => {
      const r = await call(gw, "GET", "/", { headers: { accept: "text/html,application/xhtml+xml" } })
      expect(r.status).toBe(200)
      expect(r.headers["content-type"]).toMatch(/^text\/html/)
      expect(r.text).toMatch(/<html/i)
      expect(r.text).toContain("/v1/chat/completions")
      expect(r.text).toContain("POST")
    })
  })
})

describe("concurrency cap", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, concurrency: 1 })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("a second model request while one is held is 429 too_many_requests with Retry-After; probes still answer", async () => {
    // the held call's events are a second apart: it holds the slot while the checks run
    const held = chat(gw, "::delay 1000\nhold")
    await untilModelRequestsInFlight(gw, 1)
    const second = await chat(gw, "second")
    expectOpenAi(second, 429, "rate_limit_error", "too_many_requests")
    expect(Number(second.headers["retry-after"])).toBeGreaterThanOrEqual(1)
    const legacy = await call(gw, "POST", "/v1/completions", { headers: jsonType, body: JSON.stringify({ model: "mock/echo", prompt: "x" }) })
    expectOpenAi(legacy, 429, "rate_limit_error", "too_many_requests")
    const probe = await call(gw, "GET", "/healthz")
    expect(probe.status).toBe(200)
    const ready = await call(gw, "GET", "/readyz")
    expect(ready.status).toBe(200)
    const models = await call(gw, "GET", "/v1/models")
    expect(models.status).toBe(200)
    const first = await held
    expect(first.status).toBe(200)
    await expectServing(gw)
  })

  it("a slot held by a stream is released when it ends", async () => {
    const held = chat(gw, "::delay 1000\nhold", {}, { stream: true })
    await untilModelRequestsInFlight(gw, 1)
    expectOpenAi(await chat(gw, "second"), 429, "rate_limit_error", "too_many_requests")
    expect((await held).status).toBe(200)
    await expectServing(gw)
  })
})

/** Send a model request and hang up after `afterMs`. */
const hangUp = (gw: TestGateway, body: string, afterMs: number) =>
  new Promise<void>((resolve) => {
    const req = http.request({
      host: "127.0.0.1",
      port: gw.port,
      method: "POST",
      path: "/v1/chat/completions",
      headers: { ...jsonType, "content-length": String(Buffer.byteLength(body)) },
      agent: false
    })
    req.on("error", () => resolve())
    req.on("close", () => resolve())
    req.end(body)
    setTimeout(() => req.destroy(), afterMs)
  })

describe("concurrency cap: a client that hangs up gives its slot back", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, concurrency: 1 })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("non-streamed", async () => {
    // the abandoned call would hold the slot for 3 events x 20 s
    await hangUp(gw, chatBody("::delay 20000\nabandoned"), 150)
    await untilServing(gw)
  })

  it("streamed", async () => {
    await untilModelRequestsInFlight(gw, 0)
    // the abandoned stream would hold the slot for 200 events x 300 ms
    await hangUp(gw, chatBody("::delay 300\n::chunks 200", { stream: true }), 500)
    await untilServing(gw)
  })
})

describe("request deadline", () => {
  let gw: TestGateway
  beforeAll(async () => {
    // the model's events come long after the deadline (20 s) or long before it (100 ms), so a
    // busy machine moves neither across it; time bounds are only generous backstops
    gw = await startGateway({ ...mock, requestTimeoutMs: 1_000 })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("a model call past requestTimeoutMs before any output is 504 timeout in the OpenAI envelope", async () => {
    const started = Date.now()
    const r = await chat(gw, "::delay 20000\nslow")
    const took = Date.now() - started
    expectOpenAi(r, 504, "server_error", "timeout")
    expect(took).toBeGreaterThanOrEqual(900)
    expect(took).toBeLessThan(15_000)
    await expectServing(gw)
  })

  it("a non-streamed answer that passes the deadline after its first event is still a 504", async () => {
    const started = Date.now()
    const r = await chat(gw, "::delay 100\n::chunks 200")
    const took = Date.now() - started
    expectOpenAi(r, 504, "server_error", "timeout")
    expect(took).toBeLessThan(15_000)
    await expectServing(gw)
  })

  it("a stream that passes the deadline after output ends with an error frame", async () => {
    const started = Date.now()
    const r = await chat(gw, "::delay 100\n::chunks 200", {}, { stream: true })
    expect(Date.now() - started).toBeLessThan(15_000)
    expect(r.status).toBe(200)
    expect(r.headers["content-type"]).toMatch(/^text\/event-stream/)
    const frames = r.text
      .split("\n\n")
      .map((f) => f.trim())
      .filter((f) => f.startsWith("data: "))
      .map((f) => f.slice("data: ".length))
    expect(frames.length).toBeGreaterThanOrEqual(2)
    expect(frames[0]).toContain("chunk 0")
    const last = frames.filter((f) => f !== "[DONE]").at(-1) ?? ""
    expect(JSON.parse(last)).toMatchObject({ error: { code: "timeout" } })
    await expectServing(gw)
  })

  it("the same for a stream that has not produced output", async () => {
    const r = await chat(gw, "::delay 20000\nslow", {}, { stream: true })
    expectOpenAi(r, 504, "server_error", "timeout")
    await expectServing(gw)
  })
})

describe("access log", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ ...mock, keys: [{ key: KEY, app: "a" }], accessLog: true })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("log lines are JSON with a route label and hold neither the query nor a key", async () => {
    const written: Array<string> = []
    const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array): boolean => {
      written.push(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"))
      return true
    })
    let gemini: Reply
    let openai: Reply
    let wrongKey: Reply
    try {
      // a Gemini request refused for its body (no contents): the key sits in the query
      gemini = await call(gw, "POST", `/v1beta/models/x:generateContent?key=${KEY}`, { headers: jsonType, body: "{}" })
      openai = await chat(gw, "logged", bearer())
      wrongKey = await chat(gw, "logged", bearer(`${KEY}-wrong`))
      // the log line is written after the response: wait for it (a generous backstop)
      for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(10)) {
        if (written.join("").split("\n").filter((l) => l.includes('"event":"request"')).length >= 3) break
      }
    } finally {
      spy.mockRestore()
    }
    expect(gemini.status).toBe(400)
    expect(openai.status).toBe(200)
    expect(wrongKey.status).toBe(401)
    const text = written.join("")
    const lines = text.split("\n").filter((l) => l.trim() !== "")
    expect(lines.length).toBeGreaterThanOrEqual(3)
    const records = lines.map((l) => JSON.parse(l) as Json)
    const requests = records.filter((r) => r.event === "request")
    expect(requests.length).toBe(3)
    for (const record of requests) {
      expect(typeof record.route).toBe("string")
      expect(record.route).not.toMatch(/[/?]/)
    }
    expect(requests.map((r) => r.route)).toContain("chat.completions")
    expect(requests.map((r) => r.route)).toContain("gemini.generate_content")
    expect(requests.map((r) => r.requestId)).toEqual(
      expect.arrayContaining([gemini.headers["x-gateway-request-id"], openai.headers["x-gateway-request-id"], wrongKey.headers["x-gateway-request-id"]])
    )
    expect(text).not.toContain(KEY)
    expect(text).not.toContain("sk-test")
    expect(text).not.toContain("?key=")
    expect(text).not.toContain("key=")
    expect(text).not.toContain("generateContent")
    expect(text).not.toContain("/v1/chat/completions")
  })
})
