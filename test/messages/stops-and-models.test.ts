import fc from "fast-check"
import Anthropic from "@anthropic-ai/sdk"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { ModelEvent } from "../../src/domain/Canonical.js"
import { makeStopFilter, makeTextMatcher } from "../../src/protocols/StopSequences.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

/** Reference: matching on the joined text. */
const reference = (text: string, stops: ReadonlyArray<string>) => {
  let at = -1
  let which: string | undefined
  for (const s of stops.filter((s) => s.length > 0)) {
    const i = text.indexOf(s)
    if (i >= 0 && (at < 0 || i < at)) {
      at = i
      which = s
    }
  }
  return at < 0 ? { text, matched: undefined } : { text: text.slice(0, at), matched: which }
}

/** Split text at arbitrary cut points. */
const cut = (text: string, points: ReadonlyArray<number>) => {
  const sorted = [...new Set(points.map((p) => p % (text.length + 1)))].sort((a, b) => a - b)
  const pieces: Array<string> = []
  let last = 0
  for (const p of sorted) {
    pieces.push(text.slice(last, p))
    last = p
  }
  pieces.push(text.slice(last))
  return pieces
}

describe("stop sequences", () => {
  it("matching across arbitrary chunk boundaries equals matching on the joined text", () => {
    const alphabet = fc.constantFrom("a", "b", "c", "S", "T", "O", "P", " ", "é", "😀")
    fc.assert(
      fc.property(
        fc.array(alphabet, { maxLength: 60 }).map((cs) => cs.join("")),
        fc.array(fc.array(alphabet, { minLength: 1, maxLength: 4 }).map((cs) => cs.join("")), { maxLength: 3 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        (text, stops, points) => {
          const matcher = makeTextMatcher(stops)
          let out = ""
          let matched: string | undefined
          for (const piece of cut(text, points)) {
            const r = matcher.push(piece)
            out += r.emit
            if (r.matched !== undefined) {
              matched = r.matched
              break
            }
          }
          if (matched === undefined) {
            const rest = matcher.flush()
            out += rest.emit
            matched = rest.matched
          }
          const expected = reference(text, stops)
          expect(out).toBe(expected.text)
          expect(matched).toBe(expected.matched)
        }
      ),
      { numRuns: 3000 }
    )
  })

  it("waits while a sequence that would win may still complete (found by the property above)", () => {
    const run = (stops: ReadonlyArray<string>, pieces: ReadonlyArray<string>) => {
      const m = makeTextMatcher(stops)
      let out = ""
      for (const piece of pieces) {
        const r = m.push(piece)
        out += r.emit
        if (r.matched !== undefined) return { out, matched: r.matched }
      }
      const rest = m.flush()
      return { out: out + rest.emit, matched: rest.matched }
    }
    // a longer sequence starting earlier beats a shorter one found first
    expect(run(["😀", "P😀😀"], ["P😀", "😀"])).toEqual({ out: "", matched: "P😀😀" })
    // at the same start, the first listed sequence wins
    expect(run(["PO", "P"], ["P", "O"])).toEqual({ out: "", matched: "PO" })
    // and when it never completes, the shorter one still ends the answer
    expect(run(["PO", "P"], ["P", "x"])).toEqual({ out: "", matched: "P" })
  })

  it("never matches reasoning; a tool call before the match makes a tool turn with no stop sequence", () => {
    const filter = makeStopFilter(["END"])
    const events: Array<ModelEvent> = [
      { _tag: "ReasoningDelta", text: "thinking END of thought" },
      { _tag: "TextDelta", text: "answer" },
      { _tag: "ToolCall", call: { id: "c", name: "t", arguments: "{}" } },
      { _tag: "TextDelta", text: " and END here" },
      { _tag: "Finish", reason: "stop" }
    ]
    const out = events.flatMap(filter.event)
    expect(out.filter((e) => e._tag === "ReasoningDelta")).toHaveLength(1)
    expect(out.filter((e) => e._tag === "TextDelta").map((e) => (e._tag === "TextDelta" ? e.text : "")).join("")).toBe("answer and ")
    expect(out[out.length - 1]).toEqual({ _tag: "Finish", reason: "tool_calls" })
    expect(filter.matched()).toBeUndefined()
  })
})

describe("GET /v1/models in the Messages shape", () => {
  let gateway: TestGateway
  let client: Anthropic
  beforeAll(async () => {
    gateway = await startGateway({
      providers: { p: { type: "mock", models: Object.fromEntries(Array.from({ length: 7 }, (_, i) => [`m${i}`, {}])) } }
    })
    client = new Anthropic({ apiKey: "unused-key", baseURL: gateway.url, maxRetries: 0 })
  })
  afterAll(async () => gateway?.close())

  it("pages forward and backward with has_more per direction", async () => {
    const first = await client.models.list({ limit: 3 })
    expect(first.data.map((m) => m.id)).toEqual(["p/m0", "p/m1", "p/m2"])
    expect(first.has_more).toBe(true)
    const all: Array<string> = []
    for await (const model of client.models.list({ limit: 3 })) all.push(model.id)
    expect(all).toEqual(["p/m0", "p/m1", "p/m2", "p/m3", "p/m4", "p/m5", "p/m6"])
    const before = await client.models.list({ limit: 2, before_id: "p/m3" })
    expect(before.data.map((m) => m.id)).toEqual(["p/m1", "p/m2"])
    expect(before.has_more).toBe(true)
  })

  it("refuses an unknown cursor, both cursors and a bad limit", async () => {
    for (const q of ["after_id=nope", "after_id=p/m1&before_id=p/m3", "limit=0", "limit=1001"]) {
      const res = await fetch(`${gateway.url}/v1/models?${q}`, { headers: { "anthropic-version": "2023-06-01" } })
      expect(res.status, q).toBe(400)
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error")
    }
  })
})

describe("prompt caching on decoded Messages requests", () => {
  it("keeps caller breakpoints and adds the gateway's own 5-minute ones", async () => {
    const { decodeMessages } = await import("../../src/protocols/messages/Decode.js")
    const { Either } = await import("effect")
    const decoded = decodeMessages(
      {
        model: "m",
        max_tokens: 10,
        system: [
          { type: "text", text: "first" },
          { type: "text", text: "second", cache_control: { type: "ephemeral" } },
          { type: "text", text: "last" }
        ],
        tools: [{ name: "a", input_schema: { type: "object" } }, { name: "b", input_schema: { type: "object" } }],
        messages: [{ role: "user", content: [{ type: "text", text: "hello" }] }]
      },
      { maxTools: 10, stream: false }
    )
    if (Either.isLeft(decoded)) throw new Error(decoded.left.message)
    const r = decoded.right.request
    expect(r.tools.map((t) => t.cache)).toEqual([undefined, { ttl: "5m" }])
    expect(r.system.map((p) => p.cache)).toEqual([{ ttl: "5m" }, { ttl: "5m" }, { ttl: "5m" }])
    // four slots used (caller's + last tool + first + last system): no room for the tail
    const parts = r.messages[0].parts
    expect(parts[0].type === "text" ? parts[0].cache : "x").toBeUndefined()
  })

  it("raises breakpoints before a caller 1h block when no tools reach the model", async () => {
    const { decodeMessages } = await import("../../src/protocols/messages/Decode.js")
    const { Either } = await import("effect")
    const decoded = decodeMessages(
      {
        model: "m",
        max_tokens: 10,
        system: [{ type: "text", text: "sys" }],
        messages: [{ role: "user", content: [{ type: "text", text: "doc", cache_control: { type: "ephemeral", ttl: "1h" } }, { type: "text", text: "question" }] }]
      },
      { maxTools: 10, stream: false }
    )
    if (Either.isLeft(decoded)) throw new Error(decoded.left.message)
    const r = decoded.right.request
    expect(r.system[0].cache).toEqual({ ttl: "1h" })
    const [doc, question] = r.messages[0].parts
    expect(doc.type === "text" ? doc.cache : undefined).toEqual({ ttl: "1h" })
    expect(question.type === "text" ? question.cache : undefined).toEqual({ ttl: "5m" })
  })
})

describe("placeholder tool ids in reasoning", () => {
  it("rewrites functions.<name>:<n> placeholders and known call ids to tool names", async () => {
    const { makePlaceholderRewriter } = await import("../../src/protocols/messages/Placeholders.js")
    const rewrite = makePlaceholderRewriter(new Map([["toolu_abc123", "Bash"]]))
    expect(rewrite("I will call functions.get_weather:0 then functions.Bash:12.")).toBe("I will call get_weather then Bash.")
    expect(rewrite("the result of toolu_abc123 shows files")).toBe("the result of Bash shows files")
    expect(rewrite("nothing to change here")).toBe("nothing to change here")
  })
})
