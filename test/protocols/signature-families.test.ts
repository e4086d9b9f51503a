/**
 * Reasoning signatures belong to the family that made them (spec 4.2, 2.3), over real sockets:
 * every client protocol against every provider type, checking what reaches each fake upstream and
 * what each client is given. A Messages signature reaches only the native Messages upstream; a
 * Gemini upstream's `thoughtSignature` goes back to a Gemini client on the part it came with and
 * from there to the Gemini upstream on that same part; no client is given another family's.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { foreignCallSignature } from "../../src/providers/gemini/Request.js"
import { auto as geminiAuto, type FakeGeminiUpstream, type GenerateSseOptions, startFakeGeminiUpstream } from "../support/FakeGeminiUpstream.js"
import { type BlockSpec, type FakeMessagesUpstream, messageJson, messageSse, startFakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { chatJson, type FakeUpstream, startFakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { post } from "../gemini/helpers.js"

const KEY = "sk-signature-families"
const messagesHeaders = { "x-api-key": KEY, "anthropic-version": "2023-06-01" }
const geminiHeaders = { "x-goog-api-key": KEY }

const ANT_SIG = "ant-signature-EqQB"
const REDACTED = "ant-redacted-opaque"
const GEM_SIG = "gem-signature-CiQB"

const tools = [{ name: "run", input_schema: { type: "object", properties: { cmd: { type: "string" } } } }]
const declarations = [{ functionDeclarations: [{ name: "run", parametersJsonSchema: { type: "object", properties: { cmd: { type: "string" } } } }] }]

/** A Messages conversation replaying signed and redacted thinking before a tool call and its result. */
const messagesReplay = (model: string) => ({
  model,
  max_tokens: 4000,
  thinking: { type: "enabled", budget_tokens: 2000 },
  tools,
  messages: [
    { role: "user", content: "list files" },
    {
      role: "assistant",
      content: [
        { type: "thinking", thinking: "I should run ls", signature: ANT_SIG },
        { type: "redacted_thinking", data: REDACTED },
        { type: "tool_use", id: "toolu_1", name: "run", input: { cmd: "ls" } }
      ]
    },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "a.txt" }] }
  ]
})

/** `event:`/`data:` frames of a Messages stream, data parsed. */
const messageFrames = (text: string): Array<{ readonly event: string; readonly data: any }> =>
  text
    .split("\n\n")
    .filter((frame) => frame.startsWith("event: "))
    .map((frame) => {
      const [head, data] = frame.split("\n")
      return { event: head.slice("event: ".length), data: JSON.parse(data.slice("data: ".length)) }
    })

describe("reasoning signatures stay with their family", () => {
  let ant: FakeMessagesUpstream
  let gem: FakeGeminiUpstream
  let oai: FakeUpstream
  let gateway: TestGateway
  const antBody = () => JSON.stringify(ant.requests[ant.requests.length - 1].body)
  const gemLast = () => gem.requests[gem.requests.length - 1].body as { contents: Array<{ role: string; parts: Array<Record<string, unknown>> }> }
  const messages = (body: unknown) => post(gateway.url, "/v1/messages", body, messagesHeaders)
  const generate = (model: string, body: unknown, method = "generateContent", query = "") =>
    post(gateway.url, `/v1beta/models/${model}:${method}${query}`, body, geminiHeaders)
  /** The model parts of every chunk of a Gemini-style stream (SSE or JSON array), in order. */
  const streamedParts = async (model: string, body: unknown, form: "sse" | "array"): Promise<Array<Record<string, unknown>>> => {
    const reply = await generate(model, body, "streamGenerateContent", form === "sse" ? "?alt=sse" : "")
    expect(reply.status, reply.text).toBe(200)
    // SSE frames (a keep-alive blank line may precede one), or the JSON array
    const chunks: Array<any> = form === "sse" ? reply.text.split(/\r\n\r\n/).map((f) => f.trim()).filter((f) => f !== "").map((f) => JSON.parse(f.slice("data: ".length))) : reply.json()
    return chunks.flatMap((c) => c.candidates?.[0]?.content?.parts ?? [])
  }

  beforeAll(async () => {
    ant = await startFakeMessagesUpstream()
    gem = await startFakeGeminiUpstream()
    oai = await startFakeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "sig" }],
      providers: {
        ant: { type: "anthropic", baseUrl: ant.origin, apiKey: "k" },
        gem: { type: "gemini", baseUrl: gem.origin, apiKey: "k" },
        oai: { type: "openai", baseUrl: oai.url, apiKey: "k" },
        mock: { type: "mock" }
      }
    })
  })
  beforeEach(() => {
    ant.reset()
    gem.reset()
    oai.reset()
  })
  afterAll(async () => {
    await gateway?.close()
    await Promise.all([ant?.close(), gem?.close(), oai?.close()])
  })

  describe("a Messages client's signed thinking", () => {
    it("is replayed to the native Messages upstream, signed and redacted", async () => {
      ant.onRequest(() => messageJson({ blocks: [{ type: "text", text: "ok" }] }))
      const reply = await messages(messagesReplay("ant/claude-x"))
      expect(reply.status, reply.text).toBe(200)
      const turn = (ant.requests[0].body as { messages: Array<{ content: Array<unknown> }> }).messages[1].content
      expect(turn.slice(0, 2)).toEqual([
        { type: "thinking", thinking: "I should run ls", signature: ANT_SIG },
        { type: "redacted_thinking", data: REDACTED }
      ])
    })

    it("never reaches a gemini upstream: the call goes with the skip-validation signature", async () => {
      gem.onRequest(geminiAuto({ text: "ok" }))
      for (const stream of [false, true]) {
        gem.reset()
        gem.onRequest(geminiAuto({ text: "ok" }))
        const reply = await messages({ ...messagesReplay("gem/gemini-x"), stream })
        expect(reply.status, reply.text).toBe(200)
        const sent = JSON.stringify(gemLast())
        expect(sent).not.toContain(ANT_SIG)
        expect(sent).not.toContain(REDACTED)
        const model = gemLast().contents.find((c) => c.role === "model")
        expect(model?.parts).toEqual([{ functionCall: { id: "toolu_1", name: "run", args: { cmd: "ls" } }, thoughtSignature: foreignCallSignature }])
      }
    })

    it("never reaches a chat-completions upstream", async () => {
      oai.onRequest(() => chatJson({ content: "ok" }))
      const reply = await messages(messagesReplay("oai/claude-x"))
      expect(reply.status, reply.text).toBe(200)
      const sent = JSON.stringify(oai.requests[0].body)
      expect(sent).not.toContain(ANT_SIG)
      expect(sent).not.toContain(REDACTED)
      expect(sent).not.toContain("I should run ls")
    })

    it("on the mock model: the mock's own signature is not given to the client", async () => {
      const body = { model: "mock/m", max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 1024 }, messages: [{ role: "user", content: "q\n::reason pondering\n::signature mock-sig\n::text done" }] }
      const plain = await messages(body)
      expect(plain.status, plain.text).toBe(200)
      expect(plain.json().content[0]).toEqual({ type: "thinking", thinking: "pondering", signature: "" })
      const streamed = await messages({ ...body, stream: true })
      expect(streamed.text).toContain("pondering")
      expect(streamed.text).not.toContain("mock-sig")
    })
  })

  describe("a gemini upstream's signature", () => {
    const signedCall: GenerateSseOptions = { thoughts: "Let me look.", text: "", calls: [{ name: "run", args: { cmd: "ls" } }], signature: GEM_SIG }

    it("is not given to a Messages client, JSON or stream, and a thinking block opens only for text", async () => {
      gem.onRequest(geminiAuto(signedCall))
      const body = { model: "gem/gemini-x", max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, tools, messages: [{ role: "user", content: "list files" }] }
      const plain = await messages(body)
      expect(plain.status, plain.text).toBe(200)
      expect(plain.text).not.toContain(GEM_SIG)
      expect(plain.json().content[0]).toEqual({ type: "thinking", thinking: "Let me look.", signature: "" })
      const streamed = await messages({ ...body, stream: true })
      expect(streamed.status, streamed.text).toBe(200)
      expect(streamed.text).not.toContain(GEM_SIG)
      const frames = messageFrames(streamed.text)
      expect(frames.filter((f) => f.event === "content_block_start").map((f) => f.data.content_block.type)).toEqual(["thinking", "tool_use"])
      expect(frames.find((f) => f.data.delta?.type === "signature_delta")?.data.delta).toEqual({ type: "signature_delta", signature: "" })
    })

    it("is not given to chat-completions or Responses clients", async () => {
      gem.onRequest(geminiAuto(signedCall))
      const chat = await post(gateway.url, "/v1/chat/completions", { model: "gem/gemini-x", messages: [{ role: "user", content: "q" }], tools: [{ type: "function", function: { name: "run", parameters: { type: "object" } } }] }, { authorization: `Bearer ${KEY}` })
      expect(chat.status, chat.text).toBe(200)
      expect(chat.text).not.toContain(GEM_SIG)
      const responses = await post(gateway.url, "/v1/responses", { model: "gem/gemini-x", input: "q", tools: [{ type: "function", name: "run", parameters: { type: "object" } }] }, { authorization: `Bearer ${KEY}` })
      expect(responses.status, responses.text).toBe(200)
      expect(responses.text).not.toContain(GEM_SIG)
    })

    it("comes back to a Gemini client on the functionCall part it came with, JSON and streamed; no thought parts, no ids", async () => {
      gem.onRequest(geminiAuto(signedCall))
      const body = { contents: [{ role: "user", parts: [{ text: "list files" }] }], tools: declarations }
      const plain = await generate("gem/gemini-x", body)
      expect(plain.status, plain.text).toBe(200)
      expect(plain.json().candidates[0].content.parts).toEqual([{ functionCall: { name: "run", args: { cmd: "ls" } }, thoughtSignature: GEM_SIG }])
      for (const form of ["sse", "array"] as const) {
        const parts = await streamedParts("gem/gemini-x", body, form)
        expect(parts.filter((p) => p.functionCall !== undefined)).toEqual([{ functionCall: { name: "run", args: { cmd: "ls" } }, thoughtSignature: GEM_SIG }])
        expect(parts.filter((p) => p.thoughtSignature !== undefined)).toHaveLength(1)
        expect(JSON.stringify(parts)).not.toContain("Let me look.")
      }
    })

    it("comes back on the text part of an answer with no call, JSON and streamed", async () => {
      gem.onRequest(geminiAuto({ thoughts: "hmm", text: ["It is ", "sunny."], signature: GEM_SIG }))
      const body = { contents: [{ role: "user", parts: [{ text: "weather?" }] }] }
      const plain = await generate("gem/gemini-x", body)
      expect(plain.json().candidates[0].content.parts).toEqual([{ text: "It is sunny.", thoughtSignature: GEM_SIG }])
      for (const form of ["sse", "array"] as const) {
        const parts = await streamedParts("gem/gemini-x", body, form)
        // on the last text piece, where the upstream sent it
        expect(parts.filter((p) => p.text !== "")).toEqual([{ text: "It is " }, { text: "sunny.", thoughtSignature: GEM_SIG }])
      }
    })

    it("on a signature-only last chunk, rides on the final chunk's part", async () => {
      gem.onRequest((req) =>
        req.query.alt === "sse"
          ? { kind: "sse", chunks: [{ candidates: [{ content: { role: "model", parts: [{ text: "Done." }] } }] }, { candidates: [{ content: { role: "model", parts: [{ text: "", thoughtSignature: GEM_SIG }] }, finishReason: "STOP" }], usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 1, totalTokenCount: 4 } }] }
          : { kind: "json", status: 500, body: {} }
      )
      const parts = await streamedParts("gem/gemini-x", { contents: [{ role: "user", parts: [{ text: "q" }] }] }, "sse")
      expect(parts).toEqual([{ text: "Done." }, { text: "", thoughtSignature: GEM_SIG }])
    })

    it("is not sent to a native Messages or chat-completions upstream by a Gemini client", async () => {
      ant.onRequest(() => messageJson({ blocks: [{ type: "text", text: "ok" }] }))
      oai.onRequest(() => chatJson({ content: "ok" }))
      const body = {
        contents: [
          { role: "user", parts: [{ text: "list files" }] },
          { role: "model", parts: [{ text: "checking", thoughtSignature: GEM_SIG }, { functionCall: { name: "run", args: { cmd: "ls" } }, thoughtSignature: GEM_SIG }] },
          { role: "user", parts: [{ functionResponse: { name: "run", response: { output: "a.txt" } } }] }
        ],
        tools: declarations
      }
      expect((await generate("ant/claude-x", body)).status).toBe(200)
      expect(antBody()).not.toContain(GEM_SIG)
      expect((ant.requests[0].body as { messages: Array<{ content: Array<{ type: string }> }> }).messages[1].content.map((b) => b.type)).toEqual(["text", "tool_use"])
      expect((await generate("oai/gpt-x", body)).status).toBe(200)
      expect(JSON.stringify(oai.requests[0].body)).not.toContain(GEM_SIG)
    })
  })

  describe("a Gemini client's signatures sent back to a gemini upstream", () => {
    it("stay on the part they came with; only a call without one gets the skip-validation signature", async () => {
      gem.onRequest(geminiAuto({ text: "ok" }))
      const body = {
        contents: [
          { role: "user", parts: [{ text: "list files" }] },
          { role: "model", parts: [{ text: "checking", thoughtSignature: "sig-text" }, { functionCall: { name: "run", args: { cmd: "ls" } }, thoughtSignature: GEM_SIG }] },
          { role: "user", parts: [{ functionResponse: { name: "run", response: { output: "a.txt" } } }] },
          { role: "model", parts: [{ functionCall: { name: "run", args: { cmd: "pwd" } } }] },
          { role: "user", parts: [{ functionResponse: { name: "run", response: { output: "/" } } }] }
        ],
        tools: declarations
      }
      for (const [method, query] of [["generateContent", ""], ["streamGenerateContent", "?alt=sse"]]) {
        gem.reset()
        gem.onRequest(geminiAuto({ text: "ok" }))
        expect((await generate("gem/gemini-x", body, method, query)).status).toBe(200)
        const models = gemLast().contents.filter((c) => c.role === "model")
        expect(models.map((c) => c.parts)).toEqual([
          [{ text: "checking", thoughtSignature: "sig-text" }, { functionCall: { id: "call_0", name: "run", args: { cmd: "ls" } }, thoughtSignature: GEM_SIG }],
          [{ functionCall: { id: "call_1", name: "run", args: { cmd: "pwd" } }, thoughtSignature: foreignCallSignature }]
        ])
      }
    })

    it("a whole round trip: the answer's signature reaches the upstream again on its call", async () => {
      gem.onRequest(geminiAuto({ text: "", calls: [{ name: "run", args: { cmd: "ls" } }], signature: GEM_SIG }))
      const first = { contents: [{ role: "user", parts: [{ text: "list files" }] }], tools: declarations }
      const answer = (await generate("gem/gemini-x", first)).json().candidates[0].content
      gem.reset()
      gem.onRequest(geminiAuto({ text: "two files" }))
      const second = { ...first, contents: [...first.contents, answer, { role: "user", parts: [{ functionResponse: { name: "run", response: { output: "a b" } } }] }] }
      expect((await generate("gem/gemini-x", second)).json().candidates[0].content.parts).toEqual([{ text: "two files" }])
      expect(gemLast().contents[1].parts).toEqual([{ functionCall: { id: "call_0", name: "run", args: { cmd: "ls" } }, thoughtSignature: GEM_SIG }])
    })
  })

  describe("a native Messages upstream's signature", () => {
    const blocks: Array<BlockSpec> = [
      { type: "thinking", thinking: "I should run ls", signature: ANT_SIG },
      { type: "tool_use", id: "toolu_up", name: "run", input: { cmd: "ls" } }
    ]

    it("is given to a Messages client, and not to a Gemini client", async () => {
      ant.onRequest((req) => ((req.body as { stream?: boolean }).stream === true ? messageSse({ blocks }) : messageJson({ blocks })))
      const streamed = await messages({ model: "ant/claude-x", max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 2000 }, tools, stream: true, messages: [{ role: "user", content: "q" }] })
      expect(messageFrames(streamed.text).find((f) => f.data.delta?.type === "signature_delta")?.data.delta).toEqual({ type: "signature_delta", signature: ANT_SIG })
      const body = { contents: [{ role: "user", parts: [{ text: "q" }] }], tools: declarations }
      const plain = await generate("ant/claude-x", body)
      expect(plain.json().candidates[0].content.parts).toEqual([{ functionCall: { name: "run", args: { cmd: "ls" } } }])
      const parts = await streamedParts("ant/claude-x", body, "sse")
      expect(JSON.stringify(parts)).not.toContain(ANT_SIG)
    })

    it("survives a structured answer, which streams held back until resolved", async () => {
      const structured: Array<BlockSpec> = [
        { type: "thinking", thinking: "The answer is 4", signature: ANT_SIG },
        { type: "redacted_thinking", data: REDACTED },
        { type: "tool_use", id: "toolu_up", name: "respond", input: { answer: 4 } }
      ]
      ant.onRequest((req) => ((req.body as { stream?: boolean }).stream === true ? messageSse({ blocks: structured }) : messageJson({ blocks: structured })))
      const streamed = await messages({
        model: "ant/claude-x",
        max_tokens: 4000,
        thinking: { type: "enabled", budget_tokens: 2000 },
        output_config: { format: { type: "json_schema", schema: { type: "object", properties: { answer: { type: "number" } } } } },
        stream: true,
        messages: [{ role: "user", content: "2+2?" }]
      })
      expect(streamed.status, streamed.text).toBe(200)
      const frames = messageFrames(streamed.text)
      expect(frames.find((f) => f.data.delta?.type === "signature_delta")?.data.delta).toEqual({ type: "signature_delta", signature: ANT_SIG })
      expect(frames.find((f) => f.data.content_block?.type === "redacted_thinking")?.data.content_block).toEqual({ type: "redacted_thinking", data: REDACTED })
      expect(frames.find((f) => f.data.delta?.type === "text_delta")?.data.delta).toEqual({ type: "text_delta", text: '{"answer":4}' })
    })
  })
})
