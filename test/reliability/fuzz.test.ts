/**
 * Hostile input (issue 9): property-based fuzzing of every route family's body, query, headers and
 * paths against one real gateway (a `mock` provider and a chat-completions fake upstream, keys, an
 * admin key, Files on). For every request: never a 500 (a 5xx only when the upstream is at fault,
 * and then in the envelope), the route family's error envelope (spec 7.1 to 7.4), the field named
 * where the spec asks for it, and the gateway still answers `/healthz` afterwards.
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { rawCall, type RawReply } from "../support/RawHttp.js"

type Json = Record<string, unknown>
type Family = "openai" | "messages" | "gemini" | "gateway"

const KEY = "sk-fuzz-0123456789abcdef"
const ADMIN = "admin-fuzz-0123456789abcdef"

let upstream: FakeUpstream
let gw: TestGateway

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gw = await startGateway({
    keys: [{ key: KEY, app: "fuzz" }],
    adminKey: ADMIN,
    providers: {
      mock: { type: "mock" },
      up: { type: "openai", baseUrl: upstream.url, apiKey: "k" }
    }
  })
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

// -------------------------------------------------------------------------------------------------
// Envelopes
// -------------------------------------------------------------------------------------------------

const GEMINI_STATUSES = ["INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "RESOURCE_EXHAUSTED", "INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED"]

const parseBody = (r: RawReply, where: string): Json => {
  let body: unknown
  try {
    body = JSON.parse(r.text)
  } catch {
    throw new Error(`not JSON: ${where}`)
  }
  expect(typeof body === "object" && body !== null && !Array.isArray(body), where).toBe(true)
  return body as Json
}

/** The error body of a refusal is the family's envelope (spec 7.1-7.4); returns the parsed body. */
const expectEnvelope = (r: RawReply, family: Family, where: string): Json => {
  const body = parseBody(r, where)
  if (family === "gateway") {
    expect(r.headers["content-type"], where).toMatch(/^application\/problem\+json/)
    expect(body.status, where).toBe(r.status)
    expect(typeof body.title, where).toBe("string")
    expect(typeof body.detail, where).toBe("string")
    expect(typeof body.code, where).toBe("string")
    expect(typeof body.type, where).toBe("string")
    return body
  }
  expect(r.headers["content-type"], where).toMatch(/^application\/json/)
  if (family === "openai") {
    expect(Object.keys(body), where).toEqual(["error"])
    const e = body.error as Json
    expect(Object.keys(e).sort(), where).toEqual(["code", "message", "param", "type"])
    expect(typeof e.message, where).toBe("string")
    expect((e.message as string).length, where).toBeGreaterThan(0)
    expect(typeof e.type, where).toBe("string")
    expect(e.param === null || typeof e.param === "string", where).toBe(true)
    expect(e.code === null || typeof e.code === "string", where).toBe(true)
  } else if (family === "messages") {
    expect(Object.keys(body).sort(), where).toEqual(["error", "type"])
    expect(body.type, where).toBe("error")
    const e = body.error as Json
    expect(Object.keys(e).sort(), where).toEqual(["message", "type"])
    expect(typeof e.type, where).toBe("string")
    expect(typeof e.message, where).toBe("string")
  } else {
    expect(Object.keys(body), where).toEqual(["error"])
    const e = body.error as Json
    expect(e.code, where).toBe(r.status)
    expect(GEMINI_STATUSES, where).toContain(e.status)
    expect(typeof e.message, where).toBe("string")
  }
  return body
}

/** Any answer to a client's request: never a 500, no 5xx unless the upstream may be at fault; a refusal in the envelope. */
const expectSane = (r: RawReply, family: Family, where: string, upstreamInvolved = false): void => {
  const at = `${where} -> ${r.status} ${r.text.slice(0, 300)}`
  expect(r.status, at).not.toBe(500)
  if (!upstreamInvolved) expect(r.status, at).toBeLessThan(500)
  expect(r.status, at).toBeGreaterThanOrEqual(200)
  if (r.status >= 400) expectEnvelope(r, family, at)
}

const healthy = async () => {
  const r = await rawCall(gw.port, "GET", "/healthz")
  expect(r.status).toBe(200)
}

// -------------------------------------------------------------------------------------------------
// Routes with a JSON body
// -------------------------------------------------------------------------------------------------

interface BodyRoute {
  readonly name: string
  readonly family: Family
  readonly target: string
  readonly headers: Readonly<Record<string, string>>
  /** a valid request of the route */
  readonly seed: Json
  readonly upstream?: boolean
}

const openaiAuth = { authorization: `Bearer ${KEY}` }
const messagesAuth = { "x-api-key": KEY, "anthropic-version": "2023-06-01" }
const geminiAuth = { "x-goog-api-key": KEY }
const userMessages = [{ role: "user", content: "hello there" }]
const contents = [{ role: "user", parts: [{ text: "hello there" }] }]

const BODY_ROUTES: ReadonlyArray<BodyRoute> = [
  { name: "chat", family: "openai", target: "/v1/chat/completions", headers: openaiAuth, seed: { model: "mock/echo", messages: userMessages, max_tokens: 32, temperature: 0.5 } },
  {
    name: "chat via upstream",
    family: "openai",
    target: "/v1/chat/completions",
    headers: openaiAuth,
    seed: { model: "up/m", messages: userMessages, stream: false, tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }] },
    upstream: true
  },
  { name: "completions", family: "openai", target: "/v1/completions", headers: openaiAuth, seed: { model: "mock/echo", prompt: "hello", max_tokens: 16 } },
  { name: "responses", family: "openai", target: "/v1/responses", headers: openaiAuth, seed: { model: "mock/echo", input: [{ role: "user", content: [{ type: "input_text", text: "hi" }] }], store: false, instructions: "be brief" } },
  { name: "messages", family: "messages", target: "/v1/messages", headers: messagesAuth, seed: { model: "mock/echo", max_tokens: 32, messages: userMessages, system: "be brief", stream: false } },
  { name: "messages count_tokens", family: "messages", target: "/v1/messages/count_tokens", headers: messagesAuth, seed: { model: "mock/echo", messages: userMessages } },
  { name: "gemini generateContent", family: "gemini", target: "/v1beta/models/mock%2Fecho:generateContent", headers: geminiAuth, seed: { contents, generationConfig: { temperature: 0.2, maxOutputTokens: 32 } } },
  { name: "gemini streamGenerateContent", family: "gemini", target: "/v1beta/models/mock/echo:streamGenerateContent?alt=sse", headers: geminiAuth, seed: { contents, systemInstruction: { parts: [{ text: "brief" }] } } },
  { name: "gemini countTokens", family: "gemini", target: "/v1beta/models/mock%2Fecho:countTokens", headers: geminiAuth, seed: { contents } },
  { name: "admin keys create", family: "gateway", target: "/gateway/admin/keys", headers: { authorization: `Bearer ${ADMIN}` }, seed: { app: "fuzzed-app" } }
]

const post = (route: BodyRoute, body: string | Buffer, extraHeaders: Readonly<Record<string, string>> = {}) =>
  rawCall(gw.port, "POST", route.target, { headers: { "content-type": "application/json", ...route.headers, ...extraHeaders }, body })

// ---- hostile values ----

/** Raw JSON texts JSON.stringify cannot produce, spliced in through a placeholder. */
const RAW_VALUES = [
  "1e999",
  "-1e999",
  "123456789012345678901234567890123456789",
  "0.0000000000000000000000000000000000000000000001",
  "-0",
  "9007199254740993",
  `"\\ud800"`,
  `"\\udfff\\ud800"`,
  `"a\\u0000b"`,
  "[".repeat(10_000) + "]".repeat(10_000),
  `{"a":`.repeat(10_000) + "1" + "}".repeat(10_000)
]

const RAW = (i: number) => `__RAW_${i}__`

const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(null, true, false, 0, -1, 1.5, Number.MAX_SAFE_INTEGER, -Number.MAX_VALUE, Number.MAX_VALUE, 2 ** 53 + 2, -(2 ** 31), 2 ** 32, "", [], {}, [[]], [{}], [null]),
  fc.integer({ min: 0, max: RAW_VALUES.length - 1 }).map(RAW),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 20 }),
  fc.constantFrom("\u0000", "a\u0000b", "\u202e\u200b\ufeff", "😀".repeat(50), "\ud800", "\udc00x", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
  fc.integer({ min: 1_000, max: 300_000 }).map((n) => "x".repeat(n)),
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 4 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  fc.jsonValue({ maxDepth: 3 })
)

/** Every path to a value in a JSON document (objects and arrays), the root excluded. */
const pathsOf = (value: unknown, prefix: ReadonlyArray<string | number> = []): Array<ReadonlyArray<string | number>> => {
  const out: Array<ReadonlyArray<string | number>> = []
  if (Array.isArray(value)) value.forEach((v, i) => out.push([...prefix, i], ...pathsOf(v, [...prefix, i])))
  else if (typeof value === "object" && value !== null) for (const [k, v] of Object.entries(value)) out.push([...prefix, k], ...pathsOf(v, [...prefix, k]))
  return out
}

type Mutation = { readonly kind: "set"; readonly value: unknown } | { readonly kind: "delete" } | { readonly kind: "extra"; readonly key: string; readonly value: unknown }

const mutate = (seed: Json, path: ReadonlyArray<string | number>, mutation: Mutation): unknown => {
  const copy = structuredClone(seed) as Json
  let node = copy as Record<string | number, unknown>
  for (const step of path.slice(0, -1)) node = node[step] as Record<string | number, unknown>
  const last = path[path.length - 1]
  if (mutation.kind === "set") node[last] = mutation.value
  else if (mutation.kind === "delete") {
    if (Array.isArray(node)) node.splice(last as number, 1)
    else delete node[last]
  } else {
    const target = node[last]
    if (typeof target === "object" && target !== null && !Array.isArray(target)) (target as Json)[mutation.key] = mutation.value
    else node[last] = { [mutation.key]: mutation.value }
  }
  return copy
}

/** JSON text of a document, placeholders replaced by their raw texts. */
const serialize = (doc: unknown): string => {
  let text = JSON.stringify(doc) ?? "null"
  RAW_VALUES.forEach((raw, i) => {
    text = text.split(`"${RAW(i)}"`).join(raw)
  })
  return text
}

/** A body to send, printed short in counterexamples (some are 100k characters of brackets). */
class Sample {
  constructor(readonly body: string | Buffer) {}
  [fc.toStringMethod](): string {
    const text = typeof this.body === "string" ? JSON.stringify(this.body) : `<bytes ${this.body.toString("hex")}>`
    return text.length > 400 ? `${text.slice(0, 200)} ...(${text.length} chars)... ${text.slice(-150)}` : text
  }
}

const mutationOf: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: hostileValue.map((value): Mutation => ({ kind: "set", value })) },
  { weight: 1, arbitrary: fc.constant<Mutation>({ kind: "delete" }) },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom("__proto__", "constructor", "toString", "x", "", "\u0000", "stream", "model"), hostileValue).map(([key, value]): Mutation => ({ kind: "extra", key, value })) }
)

/** A mutated valid request: up to three mutations at paths of the seed. */
const mutatedBody = (seed: Json): fc.Arbitrary<Sample> => {
  const paths = pathsOf(seed)
  return fc.array(fc.tuple(fc.integer({ min: 0, max: paths.length - 1 }), mutationOf), { minLength: 1, maxLength: 3 }).map((steps) => {
    let doc: unknown = seed
    for (const [i, m] of steps) {
      const candidates = pathsOf(doc)
      if (candidates.length === 0) break
      doc = mutate(doc as Json, candidates[i % candidates.length], m)
    }
    return new Sample(serialize(doc))
  })
}

/** Bodies that are not a request at all: any JSON value, broken JSON, garbage bytes, deep nesting. */
const garbageBody: fc.Arbitrary<Sample> = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v) ?? "null"),
  hostileValue.map((v) => serialize(v)),
  fc.string({ unit: "binary", maxLength: 200 }),
  fc.constantFrom<string | Buffer>(
    "",
    "{",
    "}",
    "nul",
    '{"model":',
    '{"model":"mock/echo",}',
    "{'model':'x'}",
    '{"a":1}{"b":2}',
    "\ufeff{}",
    '{"model":"mock/echo"\u0000}',
    "[".repeat(100_000),
    "[".repeat(10_000) + "]".repeat(10_000),
    `{"a":`.repeat(10_000) + "1" + "}".repeat(10_000),
    Buffer.from([0xff, 0xfe, 0x7b, 0x7d]),
    Buffer.from([0x7b, 0x22, 0x6d, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d]),
    Buffer.from([0xc0, 0xaf, 0x00, 0x80])
  ),
  fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes))
).map((body) => new Sample(body))

const RUNS = { mutated: 30, garbage: 15 }

describe("bodies: mutations of valid requests and garbage, every JSON route", () => {
  for (const route of BODY_ROUTES) {
    it(`${route.name}: the seed is accepted`, async () => {
      const r = await post(route, JSON.stringify(route.seed))
      expect([200, 201], `${route.name}: ${r.status} ${r.text.slice(0, 300)}`).toContain(r.status)
    })

    it(`${route.name}: mutated requests never 500, refusals in the ${route.family} envelope`, async () => {
      await fc.assert(
        fc.asyncProperty(mutatedBody(route.seed), async (sample) => {
          const r = await post(route, sample.body)
          expectSane(r, route.family, `${route.name} ${sample[fc.toStringMethod]()}`, route.upstream === true)
        }),
        { numRuns: RUNS.mutated }
      )
      await healthy()
    })

    it(`${route.name}: garbage bodies are 400 (or 413/415) in the ${route.family} envelope`, async () => {
      await fc.assert(
        fc.asyncProperty(garbageBody, async (sample) => {
          const r = await post(route, sample.body)
          const where = `${route.name} ${sample[fc.toStringMethod]()} -> ${r.status} ${r.text.slice(0, 200)}`
          // a JSON value that happens to be a valid request may pass; everything else is a client error
          if (r.status < 300) return
          expect([400, 404, 409, 413, 415, 422], where).toContain(r.status)
          expectEnvelope(r, route.family, where)
        }),
        { numRuns: RUNS.garbage }
      )
      await healthy()
    })
  }
})

describe("values that break naive decoders, on every JSON route", () => {
  const deepArray = "[".repeat(10_000) + "]".repeat(10_000)
  const deepObject = `{"a":`.repeat(10_000) + "1" + "}".repeat(10_000)
  /** The first field of each route's seed that a deep value or a `{toString}` object replaces. */
  const fieldOf = (route: BodyRoute) => Object.keys(route.seed)[route.family === "gemini" ? 0 : route.family === "gateway" ? 0 : 1]

  for (const route of BODY_ROUTES.filter((r) => r.upstream !== true)) {
    it(`${route.name}: a 10,000-deep value in a field is 400 naming the field, not a 500`, async () => {
      const field = fieldOf(route)
      for (const deep of [deepArray, deepObject]) {
        const body = JSON.stringify({ ...route.seed, [field]: "__DEEP__" }).replace('"__DEEP__"', deep)
        const r = await post(route, body)
        const where = `${route.name} ${field}=<deep> -> ${r.status} ${r.text.slice(0, 300)}`
        expect(r.status, where).toBe(400)
        const e = expectEnvelope(r, route.family, where)
        if (route.family === "openai") expect(String((e.error as Json).param).split(".")[0], where).toBe(field)
        if (route.family === "messages") expect((e.error as Json).message as string, where).toContain(field)
        if (route.family === "gemini") expect(JSON.stringify((e.error as Json).details), where).toContain(field)
        if (route.family === "gateway") expect(String(e.param).split(".")[0], where).toBe(field)
      }
      await healthy()
    })
  }

  it("an object with its own `toString` field where a tagged item is expected is 400 naming the field, not a 500", async () => {
    const cases: ReadonlyArray<readonly [BodyRoute, Json, string]> = [
      [BODY_ROUTES[0], { ...BODY_ROUTES[0].seed, messages: [{ role: { toString: "" }, content: "hi" }] }, "messages.0.role"],
      [BODY_ROUTES[3], { ...BODY_ROUTES[3].seed, input: [{ role: "user", content: [{ type: { toString: [] }, text: "hi" }] }] }, "input.0.content.0.type"],
      [BODY_ROUTES[4], { ...BODY_ROUTES[4].seed, messages: [{ role: "user", content: [{ type: { toString: 1, valueOf: 2 }, text: "hi" }] }] }, "messages.0.content.0.type"]
    ]
    for (const [route, body, field] of cases) {
      const r = await post(route, JSON.stringify(body))
      const where = `${route.name} ${JSON.stringify(body)} -> ${r.status} ${r.text.slice(0, 300)}`
      expect(r.status, where).toBe(400)
      const e = expectEnvelope(r, route.family, where).error as Json
      if (route.family === "openai") expect(e.param, where).toBe(field)
      else expect(e.message as string, where).toContain(field)
    }
    await healthy()
  })
})

// -------------------------------------------------------------------------------------------------
// Fields named where the spec says so
// -------------------------------------------------------------------------------------------------

/** Values of the wrong type for each checked field (`undefined`: the field left out). */
const WRONG: Readonly<Record<string, ReadonlyArray<unknown>>> = {
  model: [undefined, 12345, true, null, { nested: [1] }, [1, 2]],
  messages: [undefined, 12345, true, null, { nested: [1] }, "hello"],
  max_tokens: [undefined, "12", true, null, { nested: [1] }, [1, 2]]
}

describe("refusals name the field", () => {
  it("Messages: a missing or mistyped model / messages / max_tokens is 400 invalid_request_error naming it (spec 7.3)", async () => {
    const route = BODY_ROUTES.find((r) => r.name === "messages")!
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...Object.keys(WRONG)).chain((field) => fc.tuple(fc.constant(field), fc.constantFrom(...WRONG[field]))), async ([field, value]) => {
        const doc: Json = { ...route.seed }
        if (value === undefined) delete doc[field]
        else doc[field] = value
        const r = await post(route, JSON.stringify(doc))
        const where = `${field}=${JSON.stringify(value)} -> ${r.status} ${r.text.slice(0, 300)}`
        expect(r.status, where).toBe(400)
        const e = expectEnvelope(r, "messages", where).error as Json
        expect(e.type, where).toBe("invalid_request_error")
        expect(e.message as string, where).toContain(field)
      }),
      { numRuns: 15 }
    )
  })

  it("Messages: out-of-range max_tokens / temperature are 400 naming the field", async () => {
    const route = BODY_ROUTES.find((r) => r.name === "messages")!
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.tuple(fc.constant("max_tokens"), fc.constantFrom<unknown>(-1, 0, 1.5, 1e300, -1e300)),
          fc.tuple(fc.constant("temperature"), fc.constantFrom<unknown>(-0.5, 1.5, 99, 1e300, -1e300))
        ),
        async ([field, value]) => {
          const r = await post(route, JSON.stringify({ ...route.seed, [field]: value }))
          const where = `${field}=${String(value)} -> ${r.status} ${r.text.slice(0, 300)}`
          expect(r.status, where).toBe(400)
          expect((expectEnvelope(r, "messages", where).error as Json).message as string, where).toContain(field)
        }
      ),
      { numRuns: 10 }
    )
  })

  it("chat / Responses: a mistyped field is 400 with `param` naming it", async () => {
    const chat = BODY_ROUTES.find((r) => r.name === "chat")!
    const responses = BODY_ROUTES.find((r) => r.name === "responses")!
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.tuple(fc.constant(chat), fc.constantFrom("messages", "model", "temperature", "max_tokens")),
          fc.tuple(fc.constant(responses), fc.constantFrom("model", "input", "temperature", "store"))
        ),
        fc.constantFrom<unknown>({ nested: [1] }, [1, 2], true),
        async ([route, field], value) => {
          if ((field === "input" && Array.isArray(value)) || (field === "store" && value === true)) return
          const r = await post(route, JSON.stringify({ ...route.seed, [field]: value }))
          const where = `${route.name} ${field}=${JSON.stringify(value)} -> ${r.status} ${r.text.slice(0, 300)}`
          expect(r.status, where).toBe(400)
          const e = expectEnvelope(r, "openai", where).error as Json
          expect(typeof e.param, where).toBe("string")
          expect((e.param as string).split(/[.[]/)[0], where).toBe(field)
        }
      ),
      { numRuns: 15 }
    )
  })

  it("Gemini streamGenerateContent: `alt` other than sse/json and a `responseMimeType` outside the two allowed are 400 with details.fieldViolations naming the field", async () => {
    const route = { target: "/v1beta/models/mock%2Fecho:streamGenerateContent" }
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ unit: "grapheme-ascii", minLength: 1, maxLength: 20 }).filter((s) => s !== "sse" && s !== "json").map((s) => ({ field: "alt", alt: s })),
          fc.string({ unit: "grapheme", minLength: 1, maxLength: 30 }).filter((s) => s !== "application/json" && s !== "text/plain").map((s) => ({ field: "responseMimeType", mime: s }))
        ),
        async (c) => {
          const target = "alt" in c ? `${route.target}?alt=${encodeURIComponent(c.alt)}` : route.target
          const body = "mime" in c ? { contents, generationConfig: { responseMimeType: c.mime } } : { contents }
          const r = await rawCall(gw.port, "POST", target, { headers: { "content-type": "application/json", ...geminiAuth }, body: JSON.stringify(body) })
          const where = `${JSON.stringify(c)} -> ${r.status} ${r.text.slice(0, 300)}`
          expect(r.status, where).toBe(400)
          const e = expectEnvelope(r, "gemini", where).error as Json
          expect(e.status, where).toBe("INVALID_ARGUMENT")
          const violations = ((e.details as Array<Json>)?.[0]?.fieldViolations ?? []) as Array<Json>
          expect(violations.some((v) => String(v.field).includes(c.field)), where).toBe(true)
        }
      ),
      { numRuns: 15 }
    )
  })

  it("/gateway/usage: garbage `from` / `to` is 400 invalid_date naming the parameter (spec 7.1)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("from", "to"),
        fc.oneof(
          fc.string({ unit: "binary", minLength: 1, maxLength: 30 }),
          fc.constantFrom("2024-02-30", "2023-13-01", "9999999-01-01", "2024-1-1", "0000-00-00", "2024-01-01T00:00:00Z", "%00", "../..", "1e999")
        ),
        async (param, value) => {
          const target = `/gateway/usage?${param}=${encodeURIComponent(value)}`
          const r = await rawCall(gw.port, "GET", target, { headers: { authorization: `Bearer ${ADMIN}` } })
          const where = `${target} -> ${r.status} ${r.text.slice(0, 300)}`
          expect(r.status, where).toBe(400)
          const body = expectEnvelope(r, "gateway", where)
          expect(body.code, where).toBe("invalid_date")
          expect(body.param, where).toBe(param)
          expect(body.instance, where).toBe(target)
        }
      ),
      { numRuns: 15 }
    )
  })
})

// -------------------------------------------------------------------------------------------------
// Queries, headers, paths
// -------------------------------------------------------------------------------------------------

const queryValue = fc.oneof(
  fc.string({ unit: "binary", maxLength: 30 }),
  fc.constantFrom("-1", "0", "1e999", "99999999999999999999", "NaN", "%00", "\u0000", "../../etc/passwd", "desc", "asc", "x".repeat(5000), "\ud800")
)
const queryName = fc.constantFrom("limit", "after", "order", "purpose", "pageSize", "pageToken", "page", "after_id", "before_id", "ids", "alt", "key", "beta", "stream", "from", "to", "app", "x")

/** A query string of a few hostile pairs (encoded: a request target cannot hold raw bytes). */
const queryOf = fc.array(fc.tuple(queryName, queryValue), { minLength: 1, maxLength: 4 }).map((pairs) =>
  pairs.map(([k, v]) => `${k}=${encodeURIComponent(v.replace(/[\ud800-\udfff]/g, "\ufffd"))}`).join("&")
)

interface GetRoute {
  readonly target: string
  readonly family: Family
  readonly headers: Readonly<Record<string, string>>
}

const GET_ROUTES: ReadonlyArray<GetRoute> = [
  { target: "/v1/models", family: "openai", headers: openaiAuth },
  { target: "/v1/files", family: "openai", headers: openaiAuth },
  { target: "/v1/files", family: "messages", headers: messagesAuth },
  { target: "/v1/responses/resp_0123/input_items", family: "openai", headers: openaiAuth },
  { target: "/v1beta/models", family: "gemini", headers: geminiAuth },
  { target: "/v1beta/files", family: "gemini", headers: geminiAuth },
  { target: "/gateway/usage", family: "gateway", headers: { authorization: `Bearer ${ADMIN}` } },
  { target: "/gateway/status", family: "gateway", headers: {} },
  { target: "/gateway/admin/keys", family: "gateway", headers: { authorization: `Bearer ${ADMIN}` } },
  { target: "/gateway/metrics", family: "gateway", headers: {} },
  { target: "/gateway/errors", family: "gateway", headers: {} },
  { target: "/", family: "gateway", headers: {} }
]

describe("queries, headers and paths", () => {
  it("hostile queries on every GET route: never a 5xx, refusals in the envelope", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...GET_ROUTES), queryOf, async (route, query) => {
        const target = `${route.target}?${query}`
        const r = await rawCall(gw.port, "GET", target, { headers: route.headers })
        expectSane(r, route.family, target)
      }),
      { numRuns: 60 }
    )
    await healthy()
  })

  it("hostile queries on model routes (POST): never a 5xx, refusals in the envelope", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...BODY_ROUTES.filter((r) => r.upstream !== true)), queryOf, async (route, query) => {
        const target = `${route.target}${route.target.includes("?") ? "&" : "?"}${query}`
        const r = await rawCall(gw.port, "POST", target, { headers: { "content-type": "application/json", ...route.headers }, body: JSON.stringify(route.seed) })
        expectSane(r, route.family, target)
      }),
      { numRuns: 40 }
    )
    await healthy()
  })

  /** Header values a client can send (visible ASCII and spaces; Node refuses CR/LF itself). */
  const headerValue = fc.oneof(
    fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 60 }),
    fc.constantFrom("", " ", "Bearer", "Bearer ", `Bearer ${KEY} extra`, `bearer ${KEY}`, `Basic ${Buffer.from(`x:${KEY}`).toString("base64")}`, "x".repeat(8000), "application/json; charset=utf-16", "application/json; charset=x-unknown", "text/plain", "multipart/form-data; boundary=", "*/*", "1e999", "-1", "application/json;;;;")
  )
  const headerName = fc.constantFrom(
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "content-type",
    "anthropic-version",
    "anthropic-beta",
    "messages-version",
    "accept",
    "accept-encoding",
    "origin",
    "x-gateway-app",
    "x-goog-upload-protocol",
    "x-goog-upload-command",
    "x-request-id",
    "idempotency-key",
    "traceparent",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host"
  )

  it("hostile header values on model routes: never a 5xx, refusals in the envelope", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...BODY_ROUTES.filter((r) => r.upstream !== true)), fc.array(fc.tuple(headerName, headerValue), { minLength: 1, maxLength: 3 }), async (route, pairs) => {
        const headers: Record<string, string> = { "content-type": "application/json", ...route.headers }
        for (const [k, v] of pairs) headers[k] = v
        // a Messages version header moves /v1/files and /v1/models, not these routes: the family stays
        const r = await rawCall(gw.port, "POST", route.target, { headers, body: JSON.stringify(route.seed) })
        expectSane(r, route.family, `${route.target} ${JSON.stringify(pairs).slice(0, 300)}`)
      }),
      { numRuns: 60 }
    )
    await healthy()
  })

  it("wrong keys in every family: 401 in the family's envelope", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...BODY_ROUTES.filter((r) => r.family !== "gateway")), headerValue, async (route, value) => {
        const headers: Record<string, string> = { "content-type": "application/json" }
        if (route.family === "openai") headers.authorization = `Bearer ${value}`
        if (route.family === "messages") headers["x-api-key"] = value
        if (route.family === "gemini") headers["x-goog-api-key"] = value
        if (value.trim() === KEY) return
        const r = await rawCall(gw.port, "POST", route.target, { headers, body: JSON.stringify(route.seed) })
        const where = `${route.name} key=${JSON.stringify(value.slice(0, 60))} -> ${r.status} ${r.text.slice(0, 200)}`
        expect(r.status, where).toBe(401)
        expectEnvelope(r, route.family, where)
        expect(r.text, where).not.toContain(KEY)
      }),
      { numRuns: 25 }
    )
  })

  /** A path segment of hostile text, percent-encoded where a request target needs it. */
  const segment = fc.oneof(
    fc.string({ unit: "grapheme", maxLength: 20 }).map((s) => encodeURIComponent(s)),
    fc.constantFrom("..", ".", "%2e%2e", "%2E%2E%2F", "%2f", "%252f", "%00", "%ff", "%", "%zz", "%c0%af", "%ed%a0%80", "~", ";", ":", "::", "a:b:c", "x".repeat(3000), "%5c..%5c", "models", "files", "content", "")
  )
  const prefix = fc.constantFrom(
    "/v1/",
    "/v1/chat/",
    "/v1/responses/",
    "/v1/messages/",
    "/v1/files/",
    "/v1/models/",
    "/v1beta/",
    "/v1beta/models/",
    "/v1beta/files/",
    "/upload/v1beta/files/",
    "/gateway/",
    "/gateway/admin/keys/",
    "/"
  )

  const familyOfPath = (path: string, headers: Readonly<Record<string, string>>): Family => {
    if (path.startsWith("/v1beta/") || path.startsWith("/upload/v1beta/")) return "gemini"
    if (path === "/v1/messages" || path.startsWith("/v1/messages/")) return "messages"
    if (path.startsWith("/v1/")) return (path.startsWith("/v1/files") || path.startsWith("/v1/models")) && "anthropic-version" in headers ? "messages" : "openai"
    return "gateway"
  }

  it("hostile paths under every prefix and method: 4xx in the prefix's envelope, never a 5xx", async () => {
    await fc.assert(
      fc.asyncProperty(
        prefix,
        fc.array(segment, { minLength: 1, maxLength: 4 }),
        fc.constantFrom("GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"),
        fc.constantFrom<Readonly<Record<string, string>>>(openaiAuth, messagesAuth, geminiAuth, { authorization: `Bearer ${ADMIN}` }),
        async (pre, segments, method, auth) => {
          const target = pre + segments.join("/")
          const headers: Record<string, string> = { ...auth }
          const body = method === "POST" || method === "PUT" || method === "PATCH" ? "{}" : undefined
          if (body !== undefined) headers["content-type"] = "application/json"
          const r = await rawCall(gw.port, method, target, { headers, ...(body !== undefined ? { body } : {}) })
          const where = `${method} ${target.slice(0, 200)}`
          if (method === "HEAD") {
            expect(r.status, where).toBeLessThan(500)
            return
          }
          expectSane(r, familyOfPath(target, headers), where)
        }
      ),
      { numRuns: 80 }
    )
    await healthy()
  })

  it("upload routes: hostile multipart bodies on /v1/files and hostile resumable headers on /upload/v1beta/files never 5xx", async () => {
    const boundary = "fuzzBoundary0123"
    const part = (disposition: string, bytes: string) => `--${boundary}\r\nContent-Disposition: ${disposition}\r\nContent-Type: text/plain\r\n\r\n${bytes}\r\n`
    const multipartBody = fc.oneof(
      fc.string({ unit: "binary", maxLength: 200 }),
      fc.constantFrom(
        "",
        `--${boundary}--\r\n`,
        `--${boundary}\r\n`,
        part('form-data; name="file"; filename="a.txt"', "abc"),
        part('form-data; name="file"; filename="a.txt"', "abc") + `--${boundary}--\r\n`,
        part('form-data; name="purpose"', "\u0000") + part('form-data; name="file"; filename="a.txt"', "x") + `--${boundary}--\r\n`,
        part('form-data; name="file"', "no filename") + `--${boundary}--\r\n`,
        part("form-data", "no name") + `--${boundary}--\r\n`,
        part('form-data; name="file"; filename="a.txt"', "abc").repeat(80) + `--${boundary}--\r\n`,
        part('form-data; name="purpose"', "x".repeat(70_000)) + `--${boundary}--\r\n`
      )
    )
    const contentType = fc.constantFrom(`multipart/form-data; boundary=${boundary}`, "multipart/form-data", "multipart/form-data; boundary=", "multipart/related; boundary=x", "application/json", "text/plain")
    await fc.assert(
      fc.asyncProperty(multipartBody, contentType, fc.constantFrom<Readonly<Record<string, string>>>(openaiAuth, messagesAuth), async (body, type, auth) => {
        const r = await rawCall(gw.port, "POST", "/v1/files", { headers: { ...auth, "content-type": type }, body })
        const family: Family = "x-api-key" in auth ? "messages" : "openai"
        expectSane(r, family, `/v1/files ${type} ${JSON.stringify(body.slice(0, 120))}`)
      }),
      { numRuns: 30 }
    )
    const uploadHeader = fc.constantFrom("x-goog-upload-protocol", "x-goog-upload-command", "x-goog-upload-offset", "x-goog-upload-header-content-length", "x-goog-upload-header-content-type", "x-goog-upload-url")
    const uploadValue = fc.oneof(
      fc.constantFrom("resumable", "multipart", "start", "upload", "finalize", "upload, finalize", "query", "cancel", "-1", "1e999", "99999999999999999999", "0", "NaN", ""),
      fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 30 })
    )
    const query = fc.constantFrom("", "?uploadType=resumable", "?uploadType=multipart", "?uploadType=media", "?upload_id=..%2F..%2Fpasswd", "?upload_id=%00&upload_protocol=resumable", "?uploadType=resumable&upload_id=x")
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(uploadHeader, uploadValue), { minLength: 1, maxLength: 4 }), query, fc.constantFrom("", "{}", '{"file":{"displayName":"\\u0000"}}', "abc"), async (pairs, q, body) => {
        const headers: Record<string, string> = { ...geminiAuth, "content-type": "application/json" }
        for (const [k, v] of pairs) headers[k] = v
        const r = await rawCall(gw.port, "POST", `/upload/v1beta/files${q}`, { headers, body })
        expectSane(r, "gemini", `upload ${q} ${JSON.stringify(pairs)}`)
      }),
      { numRuns: 40 }
    )
    await healthy()
  })

  it("the gateway still answers a model request after all of it", async () => {
    const r = await post(BODY_ROUTES[0], JSON.stringify(BODY_ROUTES[0].seed))
    expect(r.status).toBe(200)
    expect((parseBody(r, "chat").choices as Array<Json>).length).toBe(1)
    await healthy()
  })
})
