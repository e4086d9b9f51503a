import { describe, expect, it } from "vitest"
import { emptyAnswer, type Answer, type CanonicalRequest, type StructuredOutput, type ToolDefinition } from "../../src/domain/Canonical.js"
import { isWrapped, matchesShallow, resolveStructured, respondToolName, stripFence, withRespondTool } from "../../src/domain/Structured.js"

const objectSchema = {
  type: "object",
  properties: { name: { type: "string" }, age: { type: "integer" }, tags: { type: "array" } },
  required: ["name"]
}
const structured = (schema: StructuredOutput["schema"]): StructuredOutput => ({ name: "out", schema, jsonObject: false })
const answer = (over: Partial<Answer>): Answer => ({ ...emptyAnswer, ...over })

describe("matchesShallow", () => {
  it("checks the top-level type, the required keys and the types of top-level properties", () => {
    expect(matchesShallow({ name: "a" }, objectSchema)).toBe(true)
    expect(matchesShallow({ name: "a", age: 3, tags: [], extra: null }, objectSchema)).toBe(true)
    expect(matchesShallow({}, objectSchema)).toBe(false)
    expect(matchesShallow({ name: 1 }, objectSchema)).toBe(false)
    expect(matchesShallow({ name: "a", age: 1.5 }, objectSchema)).toBe(false)
    expect(matchesShallow({ name: "a", tags: {} }, objectSchema)).toBe(false)
    expect(matchesShallow([{ name: "a" }], objectSchema)).toBe(false)
    expect(matchesShallow("a", objectSchema)).toBe(false)
    expect(matchesShallow(null, objectSchema)).toBe(false)
  })

  it("does not look below the top level", () => {
    const schema = { type: "object", properties: { inner: { type: "object", properties: { x: { type: "string" } }, required: ["x"] } } }
    expect(matchesShallow({ inner: { x: 1 } }, schema)).toBe(true)
  })

  it("reads an untyped schema with properties as an object schema", () => {
    const schema = { properties: { a: { type: "number" } }, required: ["a"] }
    expect(matchesShallow({ a: 1 }, schema)).toBe(true)
    expect(matchesShallow({ a: "1" }, schema)).toBe(false)
    expect(matchesShallow("text", schema)).toBe(false)
  })

  it("checks non-object schemas by type, unions included", () => {
    expect(matchesShallow([1, 2], { type: "array" })).toBe(true)
    expect(matchesShallow({}, { type: "array" })).toBe(false)
    expect(matchesShallow("x", { type: "string" })).toBe(true)
    expect(matchesShallow(null, { type: ["string", "null"] })).toBe(true)
    expect(matchesShallow(1, { type: ["string", "null"] })).toBe(false)
    expect(matchesShallow(2, { type: "integer" })).toBe(true)
    expect(matchesShallow(true, { type: "boolean" })).toBe(true)
    expect(matchesShallow(1, {})).toBe(true)
  })
})

describe("stripFence", () => {
  it("removes one surrounding fence, with or without a language tag", () => {
    expect(stripFence('```json\n{"a":1}\n```')).toBe('{"a":1}')
    expect(stripFence('```\n{"a":1}\n```')).toBe('{"a":1}')
    expect(stripFence('  ```json \r\n{"a":1}\r\n```  \n')).toBe('{"a":1}')
    expect(stripFence('```json\n{"a":1}```')).toBe('{"a":1}')
    expect(stripFence("```json\n[\n  1,\n  2\n]\n```")).toBe("[\n  1,\n  2\n]")
  })

  it("leaves unfenced text (trimmed) and text around a fence alone", () => {
    expect(stripFence('  {"a":1}\n')).toBe('{"a":1}')
    const prose = 'Here it is:\n```json\n{"a":1}\n```'
    expect(stripFence(prose)).toBe(prose)
  })
})

describe("respond tool", () => {
  const base: CanonicalRequest = {
    system: [],
    messages: [{ role: "user", parts: [{ type: "text", text: "hi" }] }],
    tools: [],
    toolChoice: { type: "auto" },
    sampling: {},
    parallelToolCalls: true,
    stream: false
  }
  const callerTool: ToolDefinition = { name: "lookup", parameters: { type: "object", properties: {} } }

  it("wraps a non-object schema in one `value` property", () => {
    expect(isWrapped(structured({ type: "array", items: { type: "string" } }))).toBe(true)
    expect(isWrapped(structured(objectSchema))).toBe(false)
    const request = withRespondTool({ ...base, structured: structured({ type: "string" }) })
    expect(request.tools).toEqual([
      expect.objectContaining({ name: respondToolName, parameters: { type: "object", properties: { value: { type: "string" } }, required: ["value"] } })
    ])
    expect(request.toolChoice).toEqual({ type: "tool", name: respondToolName })
  })

  it("forces respond alone, or requires some tool when caller tools stay callable", () => {
    const withTools = withRespondTool({ ...base, tools: [callerTool], structured: structured(objectSchema) })
    expect(withTools.tools.map((t) => t.name)).toEqual(["lookup", respondToolName])
    expect(withTools.toolChoice).toEqual({ type: "required" })
    const none = withRespondTool({ ...base, tools: [callerTool], toolChoice: { type: "none" }, structured: structured(objectSchema) })
    expect(none.tools.map((t) => t.name)).toEqual([respondToolName])
    expect(none.toolChoice).toEqual({ type: "tool", name: respondToolName })
    expect(withRespondTool(base)).toBe(base)
  })
})

describe("resolveStructured", () => {
  it("takes a respond call's arguments as the text, and the turn as a stop", () => {
    const args = '{"name":"Ada","age":36}'
    const result = resolveStructured(
      answer({ toolCalls: [{ id: "c1", name: respondToolName, arguments: args }], finishReason: "tool_calls" }),
      structured(objectSchema)
    )
    expect(result).toEqual({ _tag: "ok", result: { answer: answer({ text: args, toolCalls: [], finishReason: "stop" }), fallback: false } })
  })

  it("keeps a length finish of a respond call", () => {
    const result = resolveStructured(answer({ toolCalls: [{ id: "c1", name: respondToolName, arguments: "{}" }], finishReason: "length" }), structured(objectSchema))
    expect(result._tag === "ok" && result.result.answer.finishReason).toBe("length")
  })

  it("unwraps the `value` of a wrapped (non-object) schema", () => {
    const result = resolveStructured(
      answer({ toolCalls: [{ id: "c1", name: respondToolName, arguments: '{"value":["a","b"]}' }], finishReason: "tool_calls" }),
      structured({ type: "array", items: { type: "string" } })
    )
    expect(result._tag === "ok" && result.result.answer.text).toBe('["a","b"]')
    const scalar = resolveStructured(answer({ toolCalls: [{ id: "c1", name: respondToolName, arguments: '{"value":"plain"}' }] }), structured({ type: "string" }))
    expect(scalar._tag === "ok" && scalar.result.answer.text).toBe('"plain"')
  })

  it("falls back to final text in a ```json fence when it passes the check", () => {
    const result = resolveStructured(answer({ text: '```json\n{"name":"Ada"}\n```' }), structured(objectSchema))
    expect(result).toEqual({ _tag: "ok", result: { answer: answer({ text: '{"name":"Ada"}' }), fallback: true } })
  })

  it("falls back to bare JSON text for a non-object schema", () => {
    const result = resolveStructured(answer({ text: " [1, 2] " }), structured({ type: "array" }))
    expect(result).toEqual({ _tag: "ok", result: { answer: answer({ text: "[1, 2]" }), fallback: true } })
  })

  it("returns a turn that calls a caller tool as it is", () => {
    const turn = answer({ toolCalls: [{ id: "c1", name: "lookup", arguments: "{}" }], finishReason: "tool_calls" })
    expect(resolveStructured(turn, structured(objectSchema))).toEqual({ _tag: "ok", result: { answer: turn, fallback: false } })
  })

  it("fails 502 structured_output_missing without a respond call or matching text", () => {
    for (const text of ["", "Sorry, I cannot.", '{"age":3}', '```json\n{"name":1}\n```', "{not json"]) {
      const result = resolveStructured(answer({ text }), structured(objectSchema))
      expect(result._tag).toBe("error")
      if (result._tag === "error") {
        expect(result.error).toMatchObject({ _tag: "GatewayError", status: 502, kind: "upstream", code: "structured_output_missing" })
      }
    }
  })
})
