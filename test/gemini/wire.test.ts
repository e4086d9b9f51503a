/**
 * The Gemini-style API over real sockets against a fake chat-completions upstream: what reaches
 * the upstream for every request field (camelCase and snake_case), the answers in both stream
 * forms, stop sequences, structured output, thinking, paths, countTokens, models, and every 7.4
 * refusal with `details.fieldViolations`.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, openAiError, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { expectGeminiError, post, request, sseChunks, userText } from "./helpers.js"

const KEY = "sk-gemini-wire"
const auth = { "x-goog-api-key": KEY }

interface UpstreamBody {
  readonly model: string
  readonly messages: ReadonlyArray<any>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string; readonly parameters: any; readonly description?: string } }>
  readonly tool_choice?: unknown
  readonly reasoning_effort?: string
  readonly [key: string]: unknown
}

describe("Gemini-style API (wire) through a chat-completions upstream", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  let files: http.Server
  let filesUrl: string
  const last = (): UpstreamBody => upstream.requests[upstream.requests.length - 1].body as UpstreamBody
  const gen = (model: string, body: unknown, headers: Record<string, string> = {}) => post(gateway.url, `/v1beta/models/${model}:generateContent`, body, { ...auth, ...headers })
  const sse = (model: string, body: unknown) => post(gateway.url, `/v1beta/models/${model}:streamGenerateContent?alt=sse`, body, auth)
  const array = (model: string, body: unknown) => post(gateway.url, `/v1beta/models/${model}:streamGenerateContent`, body, auth)

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    // a loopback file server for fileData http(s) URIs (private networks allowed in this config)
    const png = Buffer.from("89504e470d0a1a0a0000000d4948445200000010000000100806000000", "hex")
    files = http.createServer((req, res) => {
      if (req.url === "/pic.png") return res.writeHead(200, { "content-type": "application/octet-stream" }).end(png)
      if (req.url === "/notes.txt") return res.writeHead(200, { "content-type": "text/plain" }).end("remote notes")
      res.writeHead(404).end()
    })
    await new Promise<void>((resolve) => files.listen(0, "127.0.0.1", resolve))
    filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`
    gateway = await startGateway({
      keys: [{ key: KEY, app: "gem" }],
      maxChoices: 4,
      remoteFiles: { allowPrivateNetworks: true },
      providers: {
        up: {
          type: "openai",
          baseUrl: upstream.url,
          apiKey: "k",
          models: {
            thinker: { contextLimit: 128000, variants: { low: { reasoningEffort: "low" }, medium: { reasoningEffort: "medium" }, high: { reasoningEffort: "high" } } },
            "llama3:8b": {}
          }
        }
      },
      aliases: { "gemini-*": "up/*", flash: "up/flash" }
    })
  })
  beforeEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
    await new Promise((resolve) => files?.close(resolve))
  })

  describe("generateContent", () => {
    it("answers one candidate with usage, modelVersion and a session header", async () => {
      upstream.onRequest(() => chatJson({ content: "Hi there", usage: { prompt: 20, completion: 6, cached: 5, reasoning: 2 } }))
      const reply = await gen("gemini-flash", { systemInstruction: { parts: [{ text: "be brief" }] }, contents: [userText("Hello")] })
      expect(reply.status, reply.text).toBe(200)
      const body = reply.json()
      expect(body.candidates).toEqual([{ content: { role: "model", parts: [{ text: "Hi there" }] }, finishReason: "STOP" }])
      expect(body.usageMetadata).toEqual({ promptTokenCount: 20, candidatesTokenCount: 4, thoughtsTokenCount: 2, cachedContentTokenCount: 5, totalTokenCount: 26 })
      expect(body.modelVersion).toBe("gemini-flash")
      expect(typeof body.responseId).toBe("string")
      expect(reply.headers["x-gateway-session"]).toMatch(/^ses_[0-9a-f]{32}$/)
      expect(last().model).toBe("flash")
      expect(last().messages).toEqual([
        { role: "system", content: "be brief" },
        { role: "user", content: "Hello" }
      ])
    })

    it("reads every field in snake_case as in camelCase", async () => {
      const camel = {
        systemInstruction: "sys",
        contents: [{ role: "user", parts: [{ text: "a" }, { inlineData: { mimeType: "image/png", data: "iVBORw0KGgo" } }] }],
        generationConfig: { maxOutputTokens: 50, topP: 0.5, stopSequences: ["ZZ"] },
        toolConfig: { functionCallingConfig: { mode: "ANY", allowedFunctionNames: ["look_up"] } },
        tools: [{ functionDeclarations: [{ name: "look_up", parametersJsonSchema: { type: "object", properties: { the_key: { type: "string" } } } }, { name: "other" }] }]
      }
      const snake = {
        system_instruction: "sys",
        contents: [{ role: "user", parts: [{ text: "a" }, { inline_data: { mime_type: "image/png", data: "iVBORw0KGgo" } }] }],
        generation_config: { max_output_tokens: 50, top_p: 0.5, stop_sequences: ["ZZ"] },
        tool_config: { function_calling_config: { mode: "ANY", allowed_function_names: ["look_up"] } },
        tools: [{ function_declarations: [{ name: "look_up", parameters_json_schema: { type: "object", properties: { the_key: { type: "string" } } } }, { name: "other" }] }]
      }
      upstream.onRequest(() => chatJson({ toolCalls: [{ id: "c1", name: "look_up", arguments: "{}" }] }))
      expect((await gen("gemini-a", camel)).status).toBe(200)
      const fromCamel = last()
      expect((await gen("gemini-a", snake)).status).toBe(200)
      expect(last()).toEqual(fromCamel)
      expect(fromCamel.max_tokens).toBe(50)
      expect(fromCamel.top_p).toBe(0.5)
      expect(fromCamel.stop).toBeUndefined()
      expect(fromCamel.tools?.map((t) => t.function.name)).toEqual(["look_up"])
      // a JSON Schema given as is keeps its snake_case property names
      expect(fromCamel.tools?.[0].function.parameters).toEqual({ type: "object", properties: { the_key: { type: "string" } } })
      expect(fromCamel.tool_choice).toEqual({ type: "function", function: { name: "look_up" } })
      expect(fromCamel.messages[1].content[1]).toEqual({ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } })
    })

    it("maps parts: URL-safe base64, PDF, text data, remote files, thought and signature-only parts", async () => {
      upstream.onRequest(() => chatJson({ content: "ok" }))
      const reply = await gen("gemini-a", {
        contents: [
          {
            role: "user",
            parts: [
              { text: "look" },
              { inlineData: { mimeType: "image/jpeg", data: "_-8_-w" } },
              { inlineData: { mimeType: "application/pdf", data: Buffer.from("%PDF-1.4").toString("base64") } },
              { inlineData: { mimeType: "text/plain", data: Buffer.from("inline notes").toString("base64url") } },
              { fileData: { fileUri: `${filesUrl}/pic.png`, mimeType: "image/gif" } },
              { fileData: { fileUri: `${filesUrl}/notes.txt` } }
            ]
          },
          { role: "model", parts: [{ text: "thinking...", thought: true }, { thoughtSignature: "c2ln" }, { text: "first" }] },
          { role: "model", parts: [{ text: "second", thoughtSignature: "c2ln" }] },
          userText("go on")
        ]
      })
      expect(reply.status, reply.text).toBe(200)
      const [user, model, next] = last().messages
      expect(user.content[1]).toEqual({ type: "image_url", image_url: { url: "data:image/jpeg;base64,/+8/+w==" } })
      expect(user.content[2]).toMatchObject({ type: "file", file: { file_data: `data:application/pdf;base64,${Buffer.from("%PDF-1.4").toString("base64")}` } })
      expect(user.content[3]).toEqual({ type: "text", text: "inline notes" })
      // the stored type comes from the bytes, not the declared mimeType
      expect(user.content[4].image_url.url).toMatch(/^data:image\/png;base64,/)
      expect(user.content[5]).toEqual({ type: "text", text: "remote notes" })
      // consecutive model turns joined; thought and signature-only parts dropped
      expect(model).toMatchObject({ role: "assistant" })
      expect(JSON.stringify(model.content)).not.toContain("thinking...")
      expect(JSON.stringify(model.content ?? "")).toContain("first")
      expect(JSON.stringify(model.content ?? "")).toContain("second")
      expect(next).toEqual({ role: "user", content: "go on" })
    })

    it("pairs function calls and responses by name in order, or by id, and passes results as JSON text", async () => {
      upstream.onRequest(() => chatJson({ content: "done" }))
      const reply = await gen("gemini-a", {
        contents: [
          userText("weather in two cities"),
          {
            role: "model",
            parts: [
              { functionCall: { name: "weather", args: { city: "Oslo" } }, thoughtSignature: "sig" },
              { functionCall: { name: "weather", args: { city: "Rome" } } },
              { functionCall: { name: "clock", args: {}, id: "my-clock" } }
            ]
          },
          {
            role: "function",
            parts: [
              { functionResponse: { name: "clock", id: "my-clock", response: { output: "12:00" } } },
              { functionResponse: { name: "weather", response: { output: { temp: 3 } } } },
              { functionResponse: { name: "weather", response: { error: "no station" } } }
            ]
          }
        ],
        tools: [{ functionDeclarations: [{ name: "weather", parameters: { type: "OBJECT", properties: { city: { type: "STRING" } } } }, { name: "clock" }] }]
      })
      expect(reply.status, reply.text).toBe(200)
      const messages = last().messages
      expect(messages[1].tool_calls.map((c: any) => [c.id, c.function.name, c.function.arguments])).toEqual([
        ["call_0", "weather", '{"city":"Oslo"}'],
        ["call_1", "weather", '{"city":"Rome"}'],
        ["my-clock", "clock", "{}"]
      ])
      const results = messages.slice(2).map((m: any) => [m.role, m.tool_call_id, typeof m.content === "string" ? m.content : JSON.stringify(m.content)])
      expect(results.map((r: any) => r.slice(0, 2))).toEqual([
        ["tool", "my-clock"],
        ["tool", "call_0"],
        ["tool", "call_1"]
      ])
      expect(results[1][2]).toContain('{"output":{"temp":3}}')
      expect(results[2][2]).toContain('{"error":"no station"}')
      // Gemini schema converted to JSON Schema; no parameters means no arguments
      expect(last().tools?.[0].function.parameters).toEqual({ type: "object", properties: { city: { type: "string" } } })
      expect(last().tools?.[1].function.parameters).toEqual({ type: "object", properties: {} })
    })

    it("returns the model's calls as functionCall parts without ids, finishing STOP", async () => {
      upstream.onRequest(() =>
        chatJson({ content: "checking", toolCalls: [{ id: "u1", name: "weather", arguments: '{"city":"Oslo"}' }, { id: "u2", name: "clock", arguments: "{}" }] })
      )
      const body = (await gen("gemini-a", { contents: [userText("hi")], tools: [{ functionDeclarations: [{ name: "weather" }, { name: "clock" }] }] })).json()
      expect(body.candidates[0]).toEqual({
        content: { role: "model", parts: [{ text: "checking" }, { functionCall: { name: "weather", args: { city: "Oslo" } } }, { functionCall: { name: "clock", args: {} } }] },
        finishReason: "STOP"
      })
    })

    it("maps toolConfig modes and allowedFunctionNames", async () => {
      upstream.onRequest(() => chatJson({ content: "x" }))
      const tools = [{ functionDeclarations: [{ name: "a" }, { name: "b" }, { name: "c" }] }]
      const choice = async (functionCallingConfig: unknown) => {
        const reply = await gen("gemini-a", { contents: [userText("x")], tools, toolConfig: { functionCallingConfig } })
        expect(reply.status, reply.text).toBe(200)
        return [last().tool_choice, last().tools?.map((t) => t.function.name)]
      }
      expect(await choice({ mode: "AUTO" })).toEqual(["auto", ["a", "b", "c"]])
      expect(await choice({ mode: "VALIDATED" })).toEqual(["auto", ["a", "b", "c"]])
      expect(await choice({ mode: "NONE" })).toEqual(["none", ["a", "b", "c"]])
      expect(await choice({ mode: "ANY" })).toEqual(["required", ["a", "b", "c"]])
      expect(await choice({ mode: "ANY", allowedFunctionNames: ["b", "c"] })).toEqual(["required", ["b", "c"]])
      expect(await choice({ mode: "ANY", allowedFunctionNames: ["c"] })).toEqual([{ type: "function", function: { name: "c" } }, ["c"]])
      expect(await choice({ mode: "AUTO", allowedFunctionNames: ["a"] })).toEqual(["auto", ["a"]])
    })

    it("passes sampling fields, drops what the provider refuses and lists it", async () => {
      upstream.onRequest(() => chatJson({ content: "x" }))
      const reply = await gen("gemini-a", {
        contents: [userText("x")],
        generationConfig: { temperature: 0.3, topP: 0.9, topK: 40, seed: 7, presencePenalty: 0.1, frequencyPenalty: 0.2, maxOutputTokens: 64 },
        safetySettings: [{ category: "HARM_CATEGORY_HATE_SPEECH", threshold: "BLOCK_NONE" }]
      })
      expect(reply.status, reply.text).toBe(200)
      expect(last()).toMatchObject({ temperature: 0.3, top_p: 0.9, seed: 7, presence_penalty: 0.1, frequency_penalty: 0.2, max_tokens: 64 })
      expect(last().top_k).toBeUndefined()
      expect(reply.headers["x-gateway-dropped-params"]).toBe("top_k")
    })

    it("matches stop sequences on answer text itself and never sends them", async () => {
      upstream.onRequest(() => chatJson({ content: "Hello END of story" }))
      const reply = await gen("gemini-a", { contents: [userText("x")], generationConfig: { stopSequences: ["END", "never"] } })
      expect(last().stop).toBeUndefined()
      expect(reply.json().candidates[0]).toMatchObject({ content: { parts: [{ text: "Hello " }] }, finishReason: "STOP" })
      upstream.onRequest(() => chatSse({ content: "one two END three", split: 3 }))
      const chunks = sseChunks((await sse("gemini-a", { contents: [userText("x")], generationConfig: { stopSequences: ["END"] } })).text)
      expect(chunks.map((c) => c.candidates[0].content.parts[0].text).join("")).toBe("one two ")
      expect(chunks[chunks.length - 1].candidates[0].finishReason).toBe("STOP")
    })

    it("maps finish reasons: length is MAX_TOKENS, content filter is SAFETY", async () => {
      upstream.onRequest(() => chatJson({ content: "cut", finish: "length" }))
      expect((await gen("gemini-a", { contents: [userText("x")] })).json().candidates[0].finishReason).toBe("MAX_TOKENS")
      upstream.onRequest(() => chatJson({ content: "", finish: "content_filter" }))
      expect((await gen("gemini-a", { contents: [userText("x")] })).json().candidates[0].finishReason).toBe("SAFETY")
    })
  })

  describe("structured output", () => {
    it("responseJsonSchema goes through the forced respond tool and comes back as the text", async () => {
      upstream.onRequest(() => chatJson({ toolCalls: [{ id: "r", name: "respond", arguments: '{"city":"Oslo"}' }] }))
      const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
      const reply = await gen("gemini-a", { contents: [userText("x")], generationConfig: { responseMimeType: "application/json", responseJsonSchema: schema } })
      expect(reply.json().candidates[0]).toEqual({ content: { role: "model", parts: [{ text: '{"city":"Oslo"}' }] }, finishReason: "STOP" })
      expect(last().tools?.[0].function).toMatchObject({ name: "respond", parameters: schema })
      expect(last().tool_choice).toEqual({ type: "function", function: { name: "respond" } })
    })

    it("a responseJsonSchema with Gemini's upper-case type names (the Gemini CLI's router) is read as JSON Schema", async () => {
      upstream.onRequest(() => chatJson({ toolCalls: [{ id: "r", name: "respond", arguments: '{"complexity_reasoning":"simple","complexity_score":10}' }] }))
      const routing = {
        type: "OBJECT",
        properties: { complexity_reasoning: { type: "STRING", description: "why" }, complexity_score: { type: "INTEGER" } },
        required: ["complexity_reasoning", "complexity_score"]
      }
      const reply = await gen("gemini-a", { contents: [userText("x")], generationConfig: { responseMimeType: "application/json", responseJsonSchema: routing } })
      expect(JSON.parse(reply.json().candidates[0].content.parts[0].text)).toEqual({ complexity_reasoning: "simple", complexity_score: 10 })
      expect(last().tools?.[0].function.parameters).toEqual({
        type: "object",
        properties: { complexity_reasoning: { type: "string", description: "why" }, complexity_score: { type: "integer" } },
        required: ["complexity_reasoning", "complexity_score"]
      })
    })

    it("a non-object responseSchema is carried in one property and unwrapped", async () => {
      upstream.onRequest(() => chatJson({ toolCalls: [{ id: "r", name: "respond", arguments: '{"value":["a","b"]}' }] }))
      const reply = await gen("gemini-a", {
        contents: [userText("x")],
        generationConfig: { responseMimeType: "application/json", responseSchema: { type: "ARRAY", items: { type: "STRING", format: "int32-ish" }, minItems: "1" } }
      })
      expect(reply.json().candidates[0].content.parts).toEqual([{ text: '["a","b"]' }])
      expect(last().tools?.[0].function.parameters).toEqual({
        type: "object",
        properties: { value: { type: "array", items: { type: "string" }, minItems: 1 } },
        required: ["value"]
      })
    })

    it("application/json without a schema asks for an object and strips a fence; text fallback is flagged", async () => {
      upstream.onRequest(() => chatJson({ content: '```json\n{"a":1}\n```' }))
      const reply = await gen("gemini-a", { contents: [userText("x")], generationConfig: { responseMimeType: "application/json" } })
      expect(reply.json().candidates[0].content.parts).toEqual([{ text: '{"a":1}' }])
      expect(reply.headers["x-gateway-structured-fallback"]).toBe("text")
    })

    it("a missing answer is a 502 in the Google shape, before any output on a stream too", async () => {
      upstream.onRequest(() => chatJson({ content: "no json here" }))
      const body = { contents: [userText("x")], generationConfig: { responseJsonSchema: { type: "object", properties: { a: { type: "string" } } } } }
      expectGeminiError(await gen("gemini-a", body), 502, "INTERNAL")
      upstream.onRequest(() => chatSse({ content: "no json here" }))
      expectGeminiError(await sse("gemini-a", body), 502, "INTERNAL")
    })
  })

  describe("thinking", () => {
    const level = async (thinkingConfig: unknown, model = "gemini-thinker") => {
      upstream.onRequest(() => chatJson({ content: "x" }))
      const reply = await gen(model, { contents: [userText("x")], generationConfig: { thinkingConfig } })
      expect(reply.status, reply.text).toBe(200)
      return last().reasoning_effort
    }
    it("thinkingLevel picks the variant of that name, else the nearest above, else the highest", async () => {
      expect(await level({ thinkingLevel: "HIGH" })).toBe("high")
      expect(await level({ thinkingLevel: "LOW", includeThoughts: true })).toBe("low")
      expect(await level({ thinkingLevel: "MINIMAL" })).toBe("low")
      expect(await level({ thinkingLevel: "MAX" })).toBe("high")
    })
    it("thinkingBudget maps 0 to none, up to 1024 low, up to 8192 medium, above high, -1 to nothing", async () => {
      expect(await level({ thinkingBudget: 0 })).toBeUndefined()
      expect(await level({ thinkingBudget: 1024 })).toBe("low")
      expect(await level({ thinkingBudget: 8192 })).toBe("medium")
      expect(await level({ thinkingBudget: 8193 })).toBe("high")
      expect(await level({ thinkingBudget: -1 })).toBeUndefined()
      // an id carrying its variant wins
      expect(await level({ thinkingBudget: 24000 }, "up%2Fthinker%23low")).toBe("low")
    })
    it("reasoning is never returned as parts; the stream keeps the connection alive while the model reasons", async () => {
      upstream.onRequest(() => chatSse({ reasoning: "a long thought", content: "answer", split: 100 }))
      const reply = await sse("gemini-thinker", { contents: [userText("x")] })
      // a blank line (not a `:` comment, which the Gemini CLI's parser cannot skip) before the first frame
      expect(reply.text.startsWith("\r\ndata: ")).toBe(true)
      expect(reply.text).not.toContain(": keep-alive")
      expect(reply.text).not.toContain("a long thought")
      upstream.onRequest(() => chatJson({ reasoning: "a long thought", content: "answer" }))
      expect((await gen("gemini-thinker", { contents: [userText("x")] })).text).not.toContain("a long thought")
    })
  })

  describe("streams", () => {
    it("alt=sse: a chunk per text delta, one per tool call, then empty text with finishReason and usage; no [DONE]", async () => {
      upstream.onRequest(() => chatSse({ content: "Hello world", split: 5, toolCalls: [{ id: "t", name: "f", arguments: '{"x":1}' }], usage: { prompt: 7, completion: 5 } }))
      const reply = await sse("gemini-a", { contents: [userText("x")], tools: [{ functionDeclarations: [{ name: "f" }] }] })
      expect(reply.status).toBe(200)
      expect(reply.headers["content-type"]).toMatch(/^text\/event-stream/)
      expect(reply.text).not.toContain("[DONE]")
      const chunks = sseChunks(reply.text)
      const ids = new Set(chunks.map((c) => c.responseId))
      expect(ids.size).toBe(1)
      expect(chunks.map((c) => c.candidates[0].content.parts[0])).toEqual([{ text: "Hello" }, { text: " worl" }, { text: "d" }, { functionCall: { name: "f", args: { x: 1 } } }, { text: "" }])
      expect(chunks[4].candidates[0].finishReason).toBe("STOP")
      expect(chunks[4].usageMetadata).toEqual({ promptTokenCount: 7, candidatesTokenCount: 5, totalTokenCount: 12 })
      expect(chunks.slice(0, 4).every((c) => c.candidates[0].finishReason === undefined && c.usageMetadata === undefined)).toBe(true)
      expect(chunks.every((c) => c.modelVersion === "gemini-a" && c.candidates[0].index === undefined)).toBe(true)
    })

    it("the JSON-array form is written progressively and each delivered prefix closes to valid JSON", async () => {
      upstream.onRequest(() => chatSse({ content: "abcdefghij", split: 2, delayMs: 5 }))
      const reply = await array("gemini-a", { contents: [userText("x")] })
      expect(reply.headers["content-type"]).toMatch(/^application\/json/)
      const chunks = reply.json()
      expect(chunks.map((c: any) => c.candidates[0].content.parts[0].text).join("")).toBe("abcdefghij")
      expect(chunks[chunks.length - 1].candidates[0].finishReason).toBe("STOP")
      expect(reply.pieces.length).toBeGreaterThan(2)
      let prefix = ""
      for (const piece of reply.pieces) {
        prefix += piece
        const closed = prefix.trimEnd().endsWith("]") ? prefix : `${prefix}]`
        expect(() => JSON.parse(closed), closed).not.toThrow()
      }
      expect((await post(gateway.url, "/v1beta/models/gemini-a:streamGenerateContent?alt=json", { contents: [userText("x")] }, auth)).json()).toBeInstanceOf(Array)
    })

    it("a failure before the first token is an HTTP error in both forms", async () => {
      upstream.onRequest(() => openAiError(400, "bad"))
      expectGeminiError(await sse("gemini-a", { contents: [userText("x")] }), 400, "INVALID_ARGUMENT")
      expectGeminiError(await array("gemini-a", { contents: [userText("x")] }), 400, "INVALID_ARGUMENT")
    })

    it("a failure after output ends the SSE stream with one error frame, and closes the array with the error element", async () => {
      upstream.onRequest(() => ({ kind: "resetAfter", chunks: [{ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "partial" }, finish_reason: null }] }] }))
      const frames = sseChunks((await sse("gemini-a", { contents: [userText("x")] })).text)
      expect(frames[0].candidates[0].content.parts[0].text).toBe("partial")
      expect(frames[frames.length - 1]).toMatchObject({ error: { code: 502, status: "INTERNAL" } })
      expect(frames.length).toBe(2)
      const elements = (await array("gemini-a", { contents: [userText("x")] })).json()
      expect(elements[0].candidates[0].content.parts[0].text).toBe("partial")
      expect(elements[elements.length - 1]).toMatchObject({ error: { code: 502, status: "INTERNAL" } })
    })

    it("refuses an alt other than sse or json", async () => {
      expectGeminiError(await post(gateway.url, "/v1beta/models/gemini-a:streamGenerateContent?alt=proto", { contents: [userText("x")] }, auth), 400, "INVALID_ARGUMENT", "alt")
    })
  })

  describe("multiple candidates", () => {
    it("runs one call per candidate, indexes them, sums usage and lists every session", async () => {
      let n = 0
      upstream.onRequest(() => chatJson({ content: `answer ${n++}`, usage: { prompt: 10, completion: 2 } }))
      const reply = await gen("gemini-a", { contents: [userText("x")], generationConfig: { candidateCount: 3 } })
      expect(reply.status, reply.text).toBe(200)
      const body = reply.json()
      expect(upstream.requests.length).toBe(3)
      expect(body.candidates.map((c: any) => c.index)).toEqual([0, 1, 2])
      expect(new Set(body.candidates.map((c: any) => c.content.parts[0].text))).toEqual(new Set(["answer 0", "answer 1", "answer 2"]))
      expect(body.usageMetadata).toEqual({ promptTokenCount: 30, candidatesTokenCount: 6, totalTokenCount: 36 })
      expect(String(reply.headers["x-gateway-session"]).split(",")).toHaveLength(3)
    })

    it("streams interleaved chunks with one responseId, a finish chunk per candidate and a final usage-only chunk", async () => {
      upstream.onRequest(() => chatSse({ content: "abcdef", split: 2, delayMs: 3, usage: { prompt: 4, completion: 3 } }))
      const chunks = sseChunks((await sse("gemini-a", { contents: [userText("x")], generationConfig: { candidateCount: 2 } })).text)
      expect(new Set(chunks.map((c) => c.responseId)).size).toBe(1)
      const final = chunks[chunks.length - 1]
      expect(final).toEqual({ usageMetadata: { promptTokenCount: 8, candidatesTokenCount: 6, totalTokenCount: 14 }, modelVersion: "gemini-a", responseId: final.responseId })
      for (const index of [0, 1]) {
        const own = chunks.slice(0, -1).filter((c) => c.candidates[0].index === index)
        expect(own.map((c) => c.candidates[0].content.parts[0].text).join("")).toBe("abcdef")
        expect(own[own.length - 1].candidates[0].finishReason).toBe("STOP")
        expect(own.filter((c) => c.candidates[0].finishReason !== undefined)).toHaveLength(1)
      }
    })

    it("refuses candidateCount above maxChoices", async () => {
      expectGeminiError(await gen("gemini-a", { contents: [userText("x")], generationConfig: { candidateCount: 5 } }), 400, "INVALID_ARGUMENT", "generationConfig.candidateCount")
    })

    /**
     * An upstream for cancellation: the first call of each request waits (streaming a token every
     * 50 ms when `slow`), the second fails after 100 ms (400 before output, or a reset after one
     * token); `closedEarly` counts waiting calls whose connection closed before they finished.
     */
    const cancellationUpstream = async () => {
      let calls = 0
      let closedEarly = 0
      const chunk = (text: string) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`
      const server = http.createServer((req, res) => {
        req.resume()
        req.on("end", () => {
          const n = calls++
          if (n % 2 === 0) {
            let finished = false
            res.on("close", () => {
              if (!finished) closedEarly++
            })
            res.writeHead(200, { "content-type": "text/event-stream" })
            const timer = setInterval(() => res.write(chunk(".")), 50)
            setTimeout(() => {
              finished = true
              clearInterval(timer)
              res.end()
            }, 20_000)
            res.on("close", () => clearInterval(timer))
            return
          }
          setTimeout(() => {
            if (mode === "before") res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "refused" } }))
            else {
              res.writeHead(200, { "content-type": "text/event-stream" })
              res.write(chunk("fast"))
              setTimeout(() => res.destroy(), 100)
            }
          }, 100)
        })
      })
      let mode: "before" | "after" = "before"
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      return {
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
        setMode: (m: "before" | "after") => {
          mode = m
          calls = 0
        },
        closedEarly: () => closedEarly,
        close: () => {
          server.closeAllConnections()
          return new Promise((resolve) => server.close(resolve))
        }
      }
    }

    it("any failing candidate fails the request and the other calls are cancelled (the upstream sees them closed)", async () => {
      const upstream2 = await cancellationUpstream()
      const gw = await startGateway({ keys: [{ key: KEY, app: "gem" }], maxChoices: 2, providers: { slow: { type: "openai", baseUrl: upstream2.url, apiKey: "k" } } })
      try {
        const body = { contents: [userText("x")], generationConfig: { candidateCount: 2 } }
        const path = (method: string) => `/v1beta/models/slow%2Fm:${method}`
        // before output: an HTTP error, for generateContent and both stream forms
        let expected = 0
        for (const method of ["generateContent", "streamGenerateContent?alt=sse", "streamGenerateContent"]) {
          upstream2.setMode("before")
          const started = Date.now()
          expectGeminiError(await post(gw.url, path(method), body, auth), 400, "INVALID_ARGUMENT")
          expect(Date.now() - started).toBeLessThan(5_000)
          expected++
          await expect.poll(() => upstream2.closedEarly(), { timeout: 5000 }).toBe(expected)
        }
        // after output: the error closes the stream, the waiting candidate is cancelled
        upstream2.setMode("after")
        const started = Date.now()
        const frames = sseChunks((await post(gw.url, path("streamGenerateContent?alt=sse"), body, auth)).text)
        expect(Date.now() - started).toBeLessThan(5_000)
        expect(frames.some((f) => f.candidates?.[0]?.content.parts[0].text === "fast")).toBe(true)
        expect(frames[frames.length - 1]).toMatchObject({ error: { code: 502, status: "INTERNAL" } })
        await expect.poll(() => upstream2.closedEarly(), { timeout: 5000 }).toBe(expected + 1)
        upstream2.setMode("after")
        const elements = (await post(gw.url, path("streamGenerateContent"), body, auth)).json()
        expect(elements[elements.length - 1]).toMatchObject({ error: { code: 502, status: "INTERNAL" } })
        await expect.poll(() => upstream2.closedEarly(), { timeout: 5000 }).toBe(expected + 2)
      } finally {
        await gw.close()
        await upstream2.close()
      }
    })
  })

  describe("paths", () => {
    it("reads aliases, <provider>/<model> with a literal slash, encoded ids with variants, colons and models/", async () => {
      upstream.onRequest(() => chatJson({ content: "x" }))
      const body = { contents: [userText("x")] }
      expect((await gen("flash", body)).status).toBe(200)
      expect(last().model).toBe("flash")
      expect((await gen("up/flash", body)).status).toBe(200)
      expect(last().model).toBe("flash")
      expect((await gen("models/up/thinker%23high", body)).status).toBe(200)
      expect(last()).toMatchObject({ model: "thinker", reasoning_effort: "high" })
      expect((await gen("up%2Fthinker%23medium", body)).status).toBe(200)
      expect(last().reasoning_effort).toBe("medium")
      const colon = await gen("up/llama3:8b", body)
      expect(colon.status, colon.text).toBe(200)
      expect(last().model).toBe("llama3:8b")
      expect(colon.json().modelVersion).toBe("up/llama3:8b")
    })

    it("other methods are 404; an unmatched /v1beta path names the expected shape; an unknown model is 404", async () => {
      for (const method of ["embedContent", "batchEmbedContents", "predict"]) {
        expectGeminiError(await post(gateway.url, `/v1beta/models/gemini-a:${method}`, {}, auth), 404, "NOT_FOUND")
      }
      const unmatched = expectGeminiError(await post(gateway.url, "/v1beta/up/flash:generateContent", { contents: [userText("x")] }, auth), 404, "NOT_FOUND")
      expect(unmatched.message).toContain("/v1beta/models/{model}:generateContent")
      expectGeminiError(await request(gateway.url, "GET", "/v1beta/whatever", { headers: auth }), 404, "NOT_FOUND")
      expectGeminiError(await gen("nope/model", { contents: [userText("x")] }), 404, "NOT_FOUND")
    })

    it("401 comes before 404; the key is read from bearer, x-goog-api-key or ?key=", async () => {
      expectGeminiError(await post(gateway.url, "/v1beta/nothing:here", {}), 401, "UNAUTHENTICATED")
      expectGeminiError(await post(gateway.url, "/v1beta/models/gemini-a:generateContent", { contents: [userText("x")] }, { "x-goog-api-key": "wrong" }), 401, "UNAUTHENTICATED")
      upstream.onRequest(() => chatJson({ content: "x" }))
      const body = { contents: [userText("x")] }
      expect((await post(gateway.url, "/v1beta/models/gemini-a:generateContent", body, { authorization: `Bearer ${KEY}` })).status).toBe(200)
      expect((await post(gateway.url, `/v1beta/models/gemini-a:generateContent?key=${KEY}`, body)).status).toBe(200)
    })
  })

  describe("refusals (7.4)", () => {
    const refused = async (body: Record<string, unknown>, field: string) => expectGeminiError(await gen("gemini-a", { contents: [userText("x")], ...body }), 400, "INVALID_ARGUMENT", field)
    it("names the field for every refused tool, config and part", async () => {
      for (const kind of ["googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "retrieval", "fileSearch", "googleMaps", "computerUse"]) {
        await refused({ tools: [{ functionDeclarations: [{ name: "ok" }] }, { [kind]: {} }] }, `tools.1.${kind}`)
      }
      await refused({ cachedContent: "cachedContents/abc" }, "cachedContent")
      await refused({ generationConfig: { responseLogprobs: true } }, "generationConfig.responseLogprobs")
      await refused({ generationConfig: { responseModalities: ["TEXT", "IMAGE"] } }, "generationConfig.responseModalities.1")
      await refused({ generationConfig: { responseMimeType: "text/x.enum" } }, "generationConfig.responseMimeType")
      await refused({ generationConfig: { stopSequences: ["a", "b", "c", "d", "e", "f"] } }, "generationConfig.stopSequences")
      await refused(
        {
          tools: [{ functionDeclarations: [{ name: "a" }, { name: "b" }] }],
          toolConfig: { functionCallingConfig: { mode: "ANY", allowedFunctionNames: ["a"] } },
          generationConfig: { responseSchema: { type: "OBJECT", properties: { x: { type: "STRING" } } } }
        },
        "toolConfig.functionCallingConfig"
      )
      const part = (p: unknown, role = "user") => ({ contents: [{ role, parts: [p] }] })
      await refused(part({ fileData: { fileUri: "gs://bucket/a.pdf", mimeType: "application/pdf" } }), "contents.0.parts.0.fileData.fileUri")
      await refused(part({ executableCode: { language: "PYTHON", code: "1" } }), "contents.0.parts.0.executableCode")
      await refused(part({ codeExecutionResult: { outcome: "OUTCOME_OK" } }), "contents.0.parts.0.codeExecutionResult")
      await refused(part({ videoMetadata: { startOffset: "1s" }, fileData: { fileUri: "https://example.com/v.mp4" } }), "contents.0.parts.0.videoMetadata")
      await refused({ contents: [userText("x"), { role: "model", parts: [{ inlineData: { mimeType: "image/png", data: "AAAA" } }] }] }, "contents.1.parts.0.inlineData")
      await refused(part({ inlineData: { mimeType: "image/png", data: "not base64!" } }), "contents.0.parts.0.inlineData.data")
      await refused({ contents: [] }, "contents")
      await refused({ contents: [{ role: "system", parts: [{ text: "x" }] }] }, "contents.0.role")
    })

    it("refuses a functionResponse answering no call and a call no response answers", async () => {
      await refused({ contents: [userText("x"), { role: "user", parts: [{ functionResponse: { name: "f", response: {} } }] }] }, "contents.1.parts.0.functionResponse")
      await refused(
        { contents: [userText("x"), { role: "model", parts: [{ functionCall: { name: "f", args: {} } }, { functionCall: { name: "g", args: {} } }] }, { role: "user", parts: [{ functionResponse: { name: "f", response: {} } }] }] },
        "contents.1.parts.1.functionCall"
      )
    })

    it("a file the app has not uploaded is 404 NOT_FOUND naming it", async () => {
      const error = expectGeminiError(await gen("gemini-a", { contents: [{ role: "user", parts: [{ fileData: { fileUri: "files/abc123" } }] }] }), 404, "NOT_FOUND")
      expect(error.message).toBe("File files/abc123 was not found")
    })

    it("body errors use the Gemini envelope", async () => {
      expectGeminiError(await post(gateway.url, "/v1beta/models/gemini-a:generateContent", "{not json", auth), 400, "INVALID_ARGUMENT")
      expectGeminiError(await post(gateway.url, "/v1beta/models/gemini-a:generateContent", [1, 2], auth), 400, "INVALID_ARGUMENT")
      expectGeminiError(await post(gateway.url, "/v1beta/models/gemini-a:generateContent", { contents: "x" }, auth), 400, "INVALID_ARGUMENT", "contents")
      expectGeminiError(
        await post(gateway.url, "/v1beta/models/gemini-a:generateContent", { contents: [{ parts: [{ functionCall: { args: {} } }], role: "model" }] }, auth),
        400,
        "INVALID_ARGUMENT",
        "contents.0.parts.0.functionCall.name"
      )
    })

    it("upstream failures map to Google statuses", async () => {
      upstream.onRequest(() => openAiError(429, "slow down"))
      upstream.script({ kind: "json", status: 429, body: { error: { message: "slow" } }, headers: { "retry-after": "7" } })
      const limited = await gen("gemini-a", { contents: [userText("x")] })
      expectGeminiError(limited, 429, "RESOURCE_EXHAUSTED")
      expect(limited.headers["retry-after"]).toBe("7")
      expect(limited.text).not.toContain("slow")
      upstream.onRequest(() => openAiError(500, "secret upstream detail"))
      const failed = await gen("gemini-a", { contents: [userText("x")] })
      expectGeminiError(failed, 502, "INTERNAL")
      expect(failed.text).not.toContain("secret upstream detail")
    })
  })

  describe("countTokens and models", () => {
    const count = async (body: unknown, model = "gemini-a") => post(gateway.url, `/v1beta/models/${model}:countTokens`, body, auth)
    it("estimates with the Gemini calibration: CJK two thirds of a token, 1090 per image", async () => {
      const base = (await count({ contents: [userText("")] })).json().totalTokens
      const ascii = (await count({ contents: [userText("hello world, this is a test of counting")] })).json().totalTokens
      expect(ascii - base).toBeGreaterThan(4)
      expect(ascii - base).toBeLessThan(16)
      const cjk = (await count({ contents: [userText("你".repeat(300))] })).json().totalTokens
      expect(cjk - base).toBe(200)
      const image = (await count({ contents: [{ role: "user", parts: [{ inlineData: { mimeType: "image/png", data: "iVBORw0KGgo" } }] }] })).json().totalTokens
      expect(image - base).toBe(1090)
      expect(upstream.requests).toHaveLength(0)
    })

    it("takes a whole generateContentRequest, and refuses what a real request is refused", async () => {
      const wrapped = await count({ generateContentRequest: { model: "models/gemini-a", contents: [userText("你".repeat(30))], systemInstruction: { parts: [{ text: "sys" }] } } })
      expect(wrapped.status, wrapped.text).toBe(200)
      expect(wrapped.json().totalTokens).toBeGreaterThan(20)
      expectGeminiError(await count({ contents: [userText("x")] }, "nope/x"), 404, "NOT_FOUND")
      expectGeminiError(await count({ contents: [userText("x")], tools: [{ googleSearch: {} }] }), 400, "INVALID_ARGUMENT", "tools.0.googleSearch")
    })

    it("lists models as models/<id> on one page, and gets one", async () => {
      const list = await request(gateway.url, "GET", "/v1beta/models?pageSize=1&pageToken=zzz", { headers: auth })
      expect(list.status).toBe(200)
      const names = list.json().models.map((m: any) => m.name)
      expect(names).toEqual(expect.arrayContaining(["models/up/thinker", "models/up/llama3:8b", "models/flash", "models/gemini-*"].filter((n) => n !== "models/gemini-*")))
      expect(list.json().nextPageToken).toBeUndefined()
      const thinker = list.json().models.find((m: any) => m.name === "models/up/thinker")
      expect(thinker.inputTokenLimit).toBe(128000)
      const one = await request(gateway.url, "GET", "/v1beta/models/up/thinker", { headers: auth })
      expect(one.json()).toMatchObject({ name: "models/up/thinker", inputTokenLimit: 128000 })
      expect((await request(gateway.url, "GET", "/v1beta/models/models%2Fflash", { headers: auth })).json().name).toBe("models/flash")
      expectGeminiError(await request(gateway.url, "GET", "/v1beta/models/nope%2Fx", { headers: auth }), 404, "NOT_FOUND")
    })
  })
})
