/**
 * JSON nesting past what can be serialized again (found by the fuzzer: a 10,000-deep value inside a
 * tool's `parameters` passed Schema decoding, as free-form JSON does, and overflowed the stack when
 * the upstream body was serialized: a 500). Bodies nesting deeper than MAX_JSON_DEPTH levels are
 * refused at the edge in the route family's envelope, naming where; JSON text inside a request
 * (tool-call arguments, tool results) nesting that deep is treated as text that is not JSON. What
 * an upstream answers that deep is covered by the `deep-tool` fault of upstream-faults.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_JSON_DEPTH, nestsDeeperThan, parseJsonText, tooDeepPath } from "../../src/domain/JsonDepth.js"
import { startFakeGeminiUpstream, type FakeGeminiUpstream } from "../support/FakeGeminiUpstream.js"
import { startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { rawCall } from "../support/RawHttp.js"

const KEY = "sk-deep-0123456789abcdef"
const DEEP_ARRAY = "[".repeat(10_000) + "]".repeat(10_000)
const DEEP_OBJECT = `{"a":`.repeat(10_000) + "1" + "}".repeat(10_000)
/** an array value nesting exactly `levels` levels (counting itself) */
const nested = (levels: number) => "[".repeat(levels) + "]".repeat(levels)

let openai: FakeUpstream
let messages: FakeMessagesUpstream
let gemini: FakeGeminiUpstream
let gw: TestGateway

beforeAll(async () => {
  openai = await startFakeUpstream()
  messages = await startFakeMessagesUpstream()
  gemini = await startFakeGeminiUpstream()
  gw = await startGateway({
    keys: [{ key: KEY, app: "deep" }],
    providers: {
      oa: { type: "openai", baseUrl: openai.url, apiKey: "k" },
      an: { type: "anthropic", baseUrl: messages.origin, apiKey: "k" },
      ge: { type: "gemini", baseUrl: gemini.origin, apiKey: "k" }
    }
  })
})
afterAll(async () => {
  await gw?.close()
  await Promise.all([openai?.close(), messages?.close(), gemini?.close()])
})

type Family = "openai" | "messages" | "gemini"
const headersOf = (family: Family): Record<string, string> =>
  family === "openai"
    ? { authorization: `Bearer ${KEY}`, "content-type": "application/json" }
    : family === "messages"
      ? { "x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json" }
      : { "x-goog-api-key": KEY, "content-type": "application/json" }

const post = (family: Family, target: string, body: string) => rawCall(gw.port, "POST", target, { headers: headersOf(family), body })

/** `template` (JSON with the string "__DEEP__" in it) with that string replaced by `deep`. */
const fill = (template: unknown, deep: string) => JSON.stringify(template).replace('"__DEEP__"', deep)

interface FreeForm {
  readonly name: string
  readonly family: Family
  readonly target: string
  readonly body: unknown
  /** the start of the path the refusal names */
  readonly field: string
}

const user = [{ role: "user", content: "hi" }]
const FREE_FORM: ReadonlyArray<FreeForm> = [
  {
    name: "chat tool parameters",
    family: "openai",
    target: "/v1/chat/completions",
    body: { model: "oa/m", messages: user, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: "__DEEP__" } } }] },
    field: "tools.0.function.parameters.properties"
  },
  {
    name: "chat response_format schema",
    family: "openai",
    target: "/v1/chat/completions",
    body: { model: "oa/m", messages: user, response_format: { type: "json_schema", json_schema: { name: "s", schema: "__DEEP__" } } },
    field: "response_format.json_schema.schema"
  },
  {
    name: "Responses tool parameters",
    family: "openai",
    target: "/v1/responses",
    body: { model: "an/m", input: "hi", store: false, tools: [{ type: "function", name: "f", parameters: { type: "object", x: "__DEEP__" } }] },
    field: "tools.0.parameters.x"
  },
  {
    name: "Messages input_schema",
    family: "messages",
    target: "/v1/messages",
    body: { model: "ge/m", max_tokens: 8, messages: user, tools: [{ name: "f", input_schema: { type: "object", x: "__DEEP__" } }] },
    field: "tools.0.input_schema.x"
  },
  {
    name: "Messages tool_use input",
    family: "messages",
    target: "/v1/messages",
    body: {
      model: "oa/m",
      max_tokens: 8,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "f", input: { x: "__DEEP__" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "ok" }] }
      ]
    },
    field: "messages.1.content.0.input.x"
  },
  {
    name: "Gemini functionDeclarations parameters",
    family: "gemini",
    target: "/v1beta/models/an%2Fm:generateContent",
    body: { contents: [{ role: "user", parts: [{ text: "hi" }] }], tools: [{ functionDeclarations: [{ name: "f", parameters: { type: "OBJECT", x: "__DEEP__" } }] }] },
    field: "tools.0.functionDeclarations.0.parameters.x"
  },
  {
    name: "Gemini functionResponse",
    family: "gemini",
    target: "/v1beta/models/oa%2Fm:streamGenerateContent?alt=sse",
    body: {
      contents: [
        { role: "user", parts: [{ text: "hi" }] },
        { role: "model", parts: [{ functionCall: { name: "f", args: {} } }] },
        { role: "user", parts: [{ functionResponse: { name: "f", response: { r: "__DEEP__" } } }] }
      ]
    },
    field: "contents.2.parts.0.functionResponse.response.r"
  }
]

/** The field a refusal names, read from the family's envelope. */
const namedField = (family: Family, body: Record<string, any>): string =>
  family === "openai"
    ? String(body.error.param)
    : family === "messages"
      ? String(body.error.message).split(":")[0]
      : String(body.error.details?.[0]?.fieldViolations?.[0]?.field)

describe("request bodies nesting past the limit", () => {
  for (const c of FREE_FORM) {
    it(`${c.name}: 10,000 levels deep is 400 in the ${c.family} envelope naming the field; nothing reaches the upstream`, async () => {
      const before = openai.requests.length + messages.requests.length + gemini.requests.length
      for (const deep of [DEEP_ARRAY, DEEP_OBJECT]) {
        const r = await post(c.family, c.target, fill(c.body, deep))
        const where = `${c.name}: ${r.status} ${r.text.slice(0, 300)}`
        expect(r.status, where).toBe(400)
        const body = JSON.parse(r.text) as Record<string, any>
        if (c.family === "messages") expect(body.type, where).toBe("error")
        if (c.family === "gemini") expect(body.error.status, where).toBe("INVALID_ARGUMENT")
        expect(namedField(c.family, body).startsWith(c.field), where).toBe(true)
        expect(r.text, where).toContain(`deeper than ${MAX_JSON_DEPTH} levels`)
      }
      expect(openai.requests.length + messages.requests.length + gemini.requests.length).toBe(before)
    })
  }

  it(`exactly ${MAX_JSON_DEPTH} levels reach the upstream as sent; one more is refused`, async () => {
    // the body is level 1, tools 2, the tool 3, function 4, parameters 5, properties 6: x adds its own levels
    const template = (levels: number) =>
      fill({ model: "oa/m", messages: user, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { x: "__DEEP__" } } } }] }, nested(levels))
    const within = MAX_JSON_DEPTH - 6
    openai.reset()
    const ok = await post("openai", "/v1/chat/completions", template(within))
    expect(ok.status, ok.text.slice(0, 300)).toBe(200)
    const sent = openai.requests[0].body as { tools: Array<{ function: { parameters: { properties: { x: unknown } } } }> }
    expect(JSON.stringify(sent.tools[0].function.parameters.properties.x)).toBe(nested(within))
    const over = await post("openai", "/v1/chat/completions", template(within + 1))
    expect(over.status, over.text.slice(0, 300)).toBe(400)
    expect(JSON.parse(over.text).error.param).toBe("tools.0.function.parameters.properties.x.0.0")
    expect(openai.requests.length).toBe(1)
  })

  it("a deep body answers 400 quickly and the gateway keeps serving", async () => {
    for (let i = 0; i < 20; i++) {
      const r = await post("openai", "/v1/chat/completions", `{"model":"oa/m","messages":${"[".repeat(100_000)}${"]".repeat(100_000)}}`)
      expect(r.status).toBe(400)
    }
    const r = await post("openai", "/v1/chat/completions", JSON.stringify({ model: "oa/m", messages: user }))
    expect(r.status).toBe(200)
  })
})

describe("JSON text inside a request nesting past the limit is not JSON", () => {
  const deepArgs = `{"x":${DEEP_ARRAY}}`
  const chatWithDeepArguments = (model: string) =>
    JSON.stringify({
      model,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: deepArgs } }] },
        { role: "tool", tool_call_id: "call_1", content: deepArgs }
      ],
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }]
    })

  it("chat tool-call arguments and a tool result 10,000 deep, to a Messages upstream: the call goes with input {} and the result as text", async () => {
    messages.reset()
    const r = await post("openai", "/v1/chat/completions", chatWithDeepArguments("an/m"))
    expect(r.status, r.text.slice(0, 300)).toBe(200)
    const sent = messages.requests[0].body as { messages: Array<{ role: string; content: Array<Record<string, unknown>> }> }
    const call = sent.messages[1].content.find((b) => b.type === "tool_use")!
    expect(call.input).toEqual({})
    expect(JSON.stringify(sent.messages[2].content)).toContain("[[[[")
  })

  it("the same to a Gemini upstream: functionCall args {} and the result as {output: text}", async () => {
    gemini.reset()
    const r = await post("openai", "/v1/chat/completions", chatWithDeepArguments("ge/m"))
    expect(r.status, r.text.slice(0, 300)).toBe(200)
    const sent = gemini.requests[0].body as { contents: Array<{ parts: Array<Record<string, any>> }> }
    const call = sent.contents[1].parts.find((p) => p.functionCall !== undefined)!
    expect(call.functionCall.args).toEqual({})
    const result = sent.contents[2].parts.find((p) => p.functionResponse !== undefined)!
    expect(typeof result.functionResponse.response.output).toBe("string")
  })
})

describe("JsonDepth", () => {
  it("counts levels of arrays and objects, iteratively", () => {
    expect(nestsDeeperThan(1, 0)).toBe(false)
    expect(nestsDeeperThan([], 1)).toBe(false)
    expect(nestsDeeperThan([[]], 1)).toBe(true)
    expect(nestsDeeperThan({ a: [{}] }, 3)).toBe(false)
    expect(nestsDeeperThan({ a: [{}] }, 2)).toBe(true)
    expect(nestsDeeperThan(JSON.parse(DEEP_OBJECT))).toBe(true)
    expect(tooDeepPath({ a: 1, b: [[[]]] }, 3)).toEqual(["b", "0", "0"])
    expect(tooDeepPath({ a: 1, b: [[]] }, 3)).toBeUndefined()
    expect(tooDeepPath(JSON.parse(DEEP_OBJECT))).toEqual(["a", "a", "a", "a", "a", "a", "a", "a"])
  })

  it("parseJsonText refuses text nesting past the limit like text that is not JSON", () => {
    expect(parseJsonText(nested(MAX_JSON_DEPTH))).toBeDefined()
    expect(() => parseJsonText(nested(MAX_JSON_DEPTH + 1))).toThrow(SyntaxError)
    expect(() => parseJsonText("{")).toThrow(SyntaxError)
  })
})
