/**
 * What the native Messages upstream refuses with thinking on: a forced tool choice, `temperature`
 * other than 1, `top_k`, `top_p` below 0.95. The fake upstream answers those with the real API's
 * 400; the gateway must send none of them, turn a forced choice into `auto` plus an instruction,
 * keep structured output working, and list the dropped sampling params in
 * `x-gateway-dropped-params`. Every combination, from the Messages and the chat protocols.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { auto, messageJson, startFakeMessagesUpstream, thinkingRefusal, type FakeMessagesUpstream, type Handler } from "../support/FakeMessagesUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-thinking-refusals"

interface UpstreamBody {
  readonly thinking?: { readonly type: string }
  readonly tools?: ReadonlyArray<{ readonly name: string }>
  readonly tool_choice?: { readonly type: string; readonly name?: string }
  readonly system?: ReadonlyArray<{ readonly type: string; readonly text: string }>
  readonly temperature?: number
  readonly top_p?: number
  readonly top_k?: number
}

type Choice = "auto" | "any" | "tool" | "none"
interface Case {
  readonly thinking: boolean
  readonly choice: Choice
  readonly temperature: 1 | 0.3
  readonly topK: boolean
  readonly structured: boolean
}

const cases: Array<Case> = []
for (const thinking of [false, true])
  for (const choice of ["auto", "any", "tool", "none"] as const)
    for (const temperature of [1, 0.3] as const)
      for (const topK of [false, true])
        for (const structured of [false, true]) cases.push({ thinking, choice, temperature, topK, structured })

const name = (c: Case) =>
  `thinking ${c.thinking ? "on" : "off"}, tool_choice ${c.choice}, temperature ${c.temperature}, top_k ${c.topK ? "set" : "unset"}${c.structured ? ", structured" : ""}`

const lookup = { name: "lookup", description: "Look a word up", input_schema: { type: "object", properties: { word: { type: "string" } } } }
const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] }

/** The real API's refusals first (auto); a `respond` tool offered is called, otherwise a text answer. */
const answering: Handler = (req, index) => {
  const body = req.body as UpstreamBody
  if (body.tools?.some((t) => t.name === "respond")) return auto({ blocks: [{ type: "tool_use", id: "toolu_r", name: "respond", input: { answer: "forty-two" } }] })(req, index)
  return auto({ blocks: [{ type: "text", text: "plain answer" }] })(req, index)
}

/** What must reach the upstream, and the header, for one case. */
const expected = (c: Case) => {
  // the canonical tool choice after the forced `respond` tool is added (src/domain/Structured.ts)
  let choice: { type: string; name?: string } =
    c.choice === "tool" ? { type: "tool", name: "lookup" } : c.choice === "any" ? { type: "any" } : { type: c.choice }
  let tools = ["lookup"]
  if (c.structured) {
    tools = c.choice === "none" ? ["respond"] : ["lookup", "respond"]
    choice = c.choice === "none" ? { type: "tool", name: "respond" } : { type: "any" }
  }
  let instruction: string | undefined
  if (c.thinking && (choice.type === "any" || choice.type === "tool")) {
    instruction = choice.type === "any" ? "Answer by calling one of the tools." : `Answer by calling the tool ${choice.name}.`
    choice = { type: "auto" }
  }
  const dropped = c.thinking ? [...(c.temperature !== 1 ? ["temperature"] : []), ...(c.topK ? ["top_k"] : [])] : []
  return { choice, tools, instruction, dropped }
}

describe("native Messages upstream: what it refuses with thinking on", () => {
  let upstream: FakeMessagesUpstream
  let gateway: TestGateway
  const last = () => upstream.requests[upstream.requests.length - 1].body as UpstreamBody

  beforeAll(async () => {
    upstream = await startFakeMessagesUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "refusals" }],
      providers: {
        ant: {
          type: "anthropic",
          baseUrl: upstream.origin,
          apiKey: "upstream-secret",
          models: {
            "claude-x": { variants: { low: { reasoningEffort: "low" }, high: { reasoningEffort: "high" } } },
            "claude-adaptive": { variants: { high: { params: { thinking: { type: "adaptive" } } } } }
          }
        }
      }
    })
  })
  beforeEach(() => {
    upstream.reset()
    upstream.onRequest(answering)
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  const messages = (c: Case, extra: Record<string, unknown> = {}) =>
    fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "ant/claude-x",
        max_tokens: 4000,
        messages: [{ role: "user", content: "What is the answer?" }],
        tools: [lookup],
        tool_choice: c.choice === "tool" ? { type: "tool", name: "lookup" } : { type: c.choice },
        temperature: c.temperature,
        ...(c.topK ? { top_k: 40 } : {}),
        ...(c.thinking ? { thinking: { type: "enabled", budget_tokens: 2000 } } : {}),
        ...(c.structured ? { output_config: { format: { type: "json_schema", schema } } } : {}),
        ...extra
      })
    })

  const chat = (c: Case) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "ant/claude-x",
        messages: [{ role: "user", content: "What is the answer?" }],
        tools: [{ type: "function", function: { name: lookup.name, description: lookup.description, parameters: lookup.input_schema } }],
        tool_choice: c.choice === "tool" ? { type: "function", function: { name: "lookup" } } : c.choice === "any" ? "required" : c.choice,
        temperature: c.temperature,
        ...(c.topK ? { top_k: 40 } : {}),
        ...(c.thinking ? { reasoning_effort: "high" } : {}),
        ...(c.structured ? { response_format: { type: "json_schema", json_schema: { name: "answer", schema } } } : {})
      })
    })

  /** The shared assertions on what reached the upstream and on the header. */
  const check = (c: Case, response: Response) => {
    const want = expected(c)
    expect(upstream.requests).toHaveLength(1)
    const body = last()
    expect(body.thinking?.type).toBe(c.thinking ? "enabled" : undefined)
    expect(body.tools?.map((t) => t.name)).toEqual(want.tools)
    expect(body.tool_choice).toMatchObject(want.choice)
    if (want.choice.type !== "tool") expect(body.tool_choice?.name).toBeUndefined()
    const systemTexts = (body.system ?? []).map((b) => b.text)
    if (want.instruction !== undefined) expect(systemTexts.at(-1)).toBe(want.instruction)
    else expect(systemTexts.filter((t) => t.startsWith("Answer by calling"))).toEqual([])
    expect(body.temperature).toBe(c.thinking && c.temperature !== 1 ? undefined : c.temperature)
    expect(body.top_k).toBe(c.topK && !c.thinking ? 40 : undefined)
    expect(response.headers.get("x-gateway-dropped-params") ?? "").toBe(want.dropped.join(","))
  }

  describe("Messages protocol", () => {
    for (const c of cases) {
      it(name(c), async () => {
        const response = await messages(c)
        const text = await response.text()
        if (c.structured && c.choice === "tool") {
          // refused by the gateway before any upstream call, thinking or not (spec 4.2)
          expect(response.status).toBe(400)
          expect(JSON.parse(text)).toMatchObject({ type: "error", error: { type: "invalid_request_error" } })
          expect(text).toContain("tool_choice")
          expect(upstream.requests).toHaveLength(0)
          return
        }
        expect(response.status, text).toBe(200)
        check(c, response)
        const answer = JSON.parse(text) as { content: ReadonlyArray<{ type: string; text?: string }> }
        if (c.structured) expect(answer.content).toEqual([{ type: "text", text: JSON.stringify({ answer: "forty-two" }) }])
      })
    }
  })

  describe("chat protocol", () => {
    for (const c of cases) {
      it(name(c), async () => {
        const response = await chat(c)
        const text = await response.text()
        if (c.structured && c.choice === "tool") {
          expect(response.status).toBe(400)
          expect(JSON.parse(text)).toMatchObject({ error: { param: "tool_choice" } })
          expect(upstream.requests).toHaveLength(0)
          return
        }
        expect(response.status, text).toBe(200)
        check(c, response)
        const answer = JSON.parse(text) as { choices: ReadonlyArray<{ message: { content: string | null } }> }
        if (c.structured) expect(JSON.parse(answer.choices[0].message.content ?? "")).toEqual({ answer: "forty-two" })
      })
    }
  })

  it("top_p below 0.95 is dropped with thinking on, 0.95 and above kept, any top_p kept with thinking off", async () => {
    const on: Case = { thinking: true, choice: "auto", temperature: 1, topK: false, structured: false }
    let response = await messages(on, { top_p: 0.9 })
    expect(response.status).toBe(200)
    expect(last().top_p).toBeUndefined()
    expect(response.headers.get("x-gateway-dropped-params")).toBe("top_p")
    upstream.reset()
    upstream.onRequest(answering)
    response = await messages(on, { top_p: 0.97 })
    expect(response.status).toBe(200)
    expect(last().top_p).toBe(0.97)
    expect(response.headers.get("x-gateway-dropped-params")).toBeNull()
    upstream.reset()
    upstream.onRequest(answering)
    response = await messages({ ...on, thinking: false }, { top_p: 0.5 })
    expect(response.status).toBe(200)
    expect(last().top_p).toBe(0.5)
    expect(response.headers.get("x-gateway-dropped-params")).toBeNull()
  })

  it("adaptive thinking from a variant's params gets the same treatment, streamed", async () => {
    const response = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "ant/claude-adaptive#high",
        max_tokens: 4000,
        stream: true,
        messages: [{ role: "user", content: "What is the answer?" }],
        tools: [lookup],
        tool_choice: { type: "tool", name: "lookup" },
        temperature: 0.2,
        top_k: 5
      })
    })
    expect(response.status).toBe(200)
    expect(response.headers.get("x-gateway-dropped-params")).toBe("temperature,top_k")
    const events = await response.text()
    // the fake streams its text in 5-character deltas
    expect(events).toContain('"text":"plain"')
    expect(events).toContain("event: message_stop")
    const body = last()
    expect(body.thinking).toEqual({ type: "adaptive" })
    expect(body.tool_choice?.type).toBe("auto")
    expect(body.system?.at(-1)?.text).toBe("Answer by calling the tool lookup.")
    expect(body.temperature).toBeUndefined()
    expect(body.top_k).toBeUndefined()
  })

  it("structured output with thinking on takes a text answer that matches the schema (text fallback)", async () => {
    upstream.onRequest((req) => thinkingRefusal(req.body) ?? messageJson({ blocks: [{ type: "text", text: '{"answer":"in text"}' }] }))
    const response = await messages({ thinking: true, choice: "none", temperature: 1, topK: false, structured: true })
    expect(response.status).toBe(200)
    expect(response.headers.get("x-gateway-structured-fallback")).toBe("text")
    const answer = (await response.json()) as { content: ReadonlyArray<{ type: string; text?: string }> }
    expect(answer.content).toEqual([{ type: "text", text: '{"answer":"in text"}' }])
    expect(last().tool_choice?.type).toBe("auto")
  })
})
