/**
 * The official `@google/genai` SDK against the gateway's Gemini-style API, unchanged but for its
 * base URL, through a fake chat-completions upstream and through a fake native generate-content
 * upstream: generateContent, generateContentStream, countTokens, models.list, models.get, tool
 * round trips, structured output, multiple candidates and errors.
 */
import { ApiError, FunctionCallingConfigMode, GoogleGenAI, Type } from "@google/genai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, openAiError, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { generateJson, generateSse, geminiError, startFakeGeminiUpstream, type FakeGeminiUpstream } from "../support/FakeGeminiUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-genai-sdk-test"

/** What a test needs from either upstream: scripted answers and what reached it. */
interface Upstream {
  readonly providerConfig: Record<string, unknown>
  readonly text: (text: string, usage: { prompt: number; output: number; thoughts?: number }) => void
  readonly streamed: (pieces: ReadonlyArray<string>) => void
  readonly call: (name: string, args: Record<string, unknown>) => void
  readonly respond: (args: Record<string, unknown>) => void
  readonly fail429: () => void
  readonly requests: () => number
  /** the model name and the tool results (id-less JSON text) that reached the upstream last */
  readonly lastModel: () => string
  readonly lastToolResults: () => ReadonlyArray<string>
  readonly lastToolNames: () => ReadonlyArray<string>
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const chatUpstream = async (): Promise<Upstream> => {
  const up: FakeUpstream = await startFakeUpstream()
  const last = () => up.requests[up.requests.length - 1].body as any
  return {
    providerConfig: { type: "openai", baseUrl: up.url, apiKey: "k" },
    text: (text, usage) => up.onRequest(() => chatJson({ content: text, usage: { prompt: usage.prompt, completion: usage.output + (usage.thoughts ?? 0), reasoning: usage.thoughts ?? 0 } })),
    streamed: (pieces) => up.onRequest(() => chatSse({ content: pieces.join(""), split: pieces[0].length })),
    call: (name, args) => up.script(chatJson({ toolCalls: [{ id: "up-1", name, arguments: JSON.stringify(args) }] })),
    respond: (args) => up.onRequest(() => chatJson({ toolCalls: [{ id: "r", name: "respond", arguments: JSON.stringify(args) }] })),
    fail429: () => up.onRequest(() => openAiError(429, "slow down")),
    requests: () => up.requests.length,
    lastModel: () => last().model,
    lastToolResults: () => last().messages.filter((m: any) => m.role === "tool").map((m: any) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content))),
    lastToolNames: () => (last().tools ?? []).map((t: any) => t.function.name),
    reset: () => up.reset(),
    close: () => up.close()
  }
}

const nativeUpstream = async (): Promise<Upstream> => {
  const up: FakeGeminiUpstream = await startFakeGeminiUpstream()
  const last = () => up.requests[up.requests.length - 1]
  return {
    providerConfig: { type: "gemini", baseUrl: up.origin, apiKey: "k" },
    text: (text, usage) => up.onRequest(() => generateJson({ text, usage: { prompt: usage.prompt, candidates: usage.output, ...(usage.thoughts ? { thoughts: usage.thoughts } : {}) } })),
    streamed: (pieces) => up.onRequest(() => generateSse({ thoughts: "hidden thought", text: [...pieces] })),
    call: (name, args) => up.script(generateJson({ text: "", calls: [{ name, args }], signature: "sig-1" })),
    respond: (args) => up.onRequest(() => generateJson({ text: "", calls: [{ name: "respond", args }] })),
    fail429: () => up.onRequest(() => geminiError(429, "RESOURCE_EXHAUSTED", "quota")),
    requests: () => up.requests.length,
    lastModel: () => /\/models\/([^:]+):/.exec(last().path)?.[1] ?? "",
    lastToolResults: () =>
      ((last().body as any).contents as Array<any>).flatMap((c) => c.parts.filter((p: any) => p.functionResponse).map((p: any) => JSON.stringify(p.functionResponse.response))),
    lastToolNames: () => ((last().body as any).tools ?? []).flatMap((t: any) => t.functionDeclarations.map((d: any) => d.name)),
    reset: () => up.reset(),
    close: () => up.close()
  }
}

describe.each([
  ["a chat-completions upstream", chatUpstream],
  ["a native generate-content upstream", nativeUpstream]
])("@google/genai SDK through %s", (_name, makeUpstream) => {
  let upstream: Upstream
  let gateway: TestGateway
  let ai: GoogleGenAI

  beforeAll(async () => {
    upstream = await makeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "genai" }],
      maxChoices: 3,
      providers: { up: { ...upstream.providerConfig, models: { "gemini-pro": { contextLimit: 1_000_000 } } } },
      aliases: { "gemini-*": "up/*" }
    })
    ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: gateway.url, retryOptions: { attempts: 1 } } as never })
  })
  beforeEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("generateContent: text, usage and the model", async () => {
    upstream.text("Hi from the gateway", { prompt: 12, output: 5, thoughts: 3 })
    const response = await ai.models.generateContent({ model: "gemini-flash", contents: "Hello", config: { systemInstruction: "be brief", temperature: 0.2 } })
    expect(response.text).toBe("Hi from the gateway")
    expect(response.candidates?.[0].finishReason).toBe("STOP")
    expect(response.usageMetadata).toMatchObject({ promptTokenCount: 12, candidatesTokenCount: 5, thoughtsTokenCount: 3, totalTokenCount: 20 })
    expect(response.modelVersion).toBe("gemini-flash")
    expect(upstream.lastModel()).toBe("flash")
  })

  it("generateContentStream: the deltas in order, reasoning never shown", async () => {
    upstream.streamed(["Stream", "ing ", "works"])
    const pieces: Array<string> = []
    let finish: string | undefined
    for await (const chunk of await ai.models.generateContentStream({ model: "gemini-flash", contents: "go" })) {
      if (chunk.text) pieces.push(chunk.text)
      finish ??= chunk.candidates?.[0].finishReason
      expect(JSON.stringify(chunk)).not.toContain("hidden thought")
    }
    expect(pieces.join("")).toBe("Streaming works")
    expect(finish).toBe("STOP")
  })

  it("a tool round trip: the call comes back id-less, the functionResponse reaches the upstream as a tool result", async () => {
    upstream.call("read_file", { path: "a.txt" })
    const tools = [{ functionDeclarations: [{ name: "read_file", description: "read a file", parameters: { type: Type.OBJECT, properties: { path: { type: Type.STRING } }, required: ["path"] } }] }]
    const first = await ai.models.generateContent({ model: "gemini-flash", contents: "read a.txt", config: { tools } })
    expect(first.functionCalls).toEqual([{ name: "read_file", args: { path: "a.txt" } }])
    upstream.text("The file says hello", { prompt: 30, output: 5 })
    const second = await ai.models.generateContent({
      model: "gemini-flash",
      contents: [
        { role: "user", parts: [{ text: "read a.txt" }] },
        first.candidates![0].content!,
        { role: "user", parts: [{ functionResponse: { name: "read_file", response: { output: "hello" } } }] }
      ],
      config: { tools, toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.AUTO } } }
    })
    expect(second.text).toBe("The file says hello")
    expect(upstream.lastToolResults()).toEqual(['{"output":"hello"}'])
    expect(upstream.lastToolNames()).toEqual(["read_file"])
  })

  it("structured output with responseSchema and responseJsonSchema", async () => {
    upstream.respond({ value: ["a", "b"] })
    const listed = await ai.models.generateContent({
      model: "gemini-flash",
      contents: "two letters",
      config: { responseMimeType: "application/json", responseSchema: { type: Type.ARRAY, items: { type: Type.STRING } } }
    })
    expect(JSON.parse(listed.text ?? "")).toEqual(["a", "b"])
    upstream.respond({ reasoning: "easy", model_choice: "flash" })
    const routed = await ai.models.generateContent({
      model: "gemini-flash",
      contents: "route this",
      config: { responseMimeType: "application/json", responseJsonSchema: { type: "object", properties: { reasoning: { type: "string" }, model_choice: { type: "string", enum: ["flash", "pro"] } }, required: ["reasoning", "model_choice"] } }
    })
    expect(JSON.parse(routed.text ?? "")).toEqual({ reasoning: "easy", model_choice: "flash" })
  })

  it("several candidates: one call each, indexed", async () => {
    upstream.text("same", { prompt: 4, output: 1 })
    const response = await ai.models.generateContent({ model: "gemini-flash", contents: "x", config: { candidateCount: 3 } })
    expect(response.candidates?.map((c) => c.index)).toEqual([0, 1, 2])
    expect(response.usageMetadata?.promptTokenCount).toBe(12)
    expect(upstream.requests()).toBe(3)
  })

  it("countTokens without an upstream call", async () => {
    const counted = await ai.models.countTokens({ model: "gemini-flash", contents: "hello world, how are you today?" })
    expect(counted.totalTokens).toBeGreaterThan(5)
    expect(counted.totalTokens).toBeLessThan(25)
    expect(upstream.requests()).toBe(0)
  })

  it("models.list and models.get", async () => {
    const names: Array<string> = []
    for await (const model of await ai.models.list()) names.push(model.name ?? "")
    // the declared model, and the name the `gemini-*` glob routes to it
    expect(names).toEqual(["models/up/gemini-pro", "models/gemini-gemini-pro"])
    const model = await ai.models.get({ model: "up/gemini-pro" })
    expect(model).toMatchObject({ name: "models/up/gemini-pro", inputTokenLimit: 1_000_000 })
  })

  it("errors surface as the SDK's ApiError with Google statuses", async () => {
    upstream.fail429()
    const limited = await ai.models.generateContent({ model: "gemini-flash", contents: "x" }).catch((e: unknown) => e)
    expect(limited).toBeInstanceOf(ApiError)
    expect((limited as ApiError).status).toBe(429)
    expect((limited as ApiError).message).toContain("RESOURCE_EXHAUSTED")
    const refused = await ai.models.generateContent({ model: "gemini-flash", contents: "x", config: { tools: [{ googleSearch: {} }] } }).catch((e: unknown) => e)
    expect((refused as ApiError).status).toBe(400)
    expect((refused as ApiError).message).toContain("tools.0.googleSearch")
    const missing = await ai.models.generateContent({ model: "nope/x", contents: "x" }).catch((e: unknown) => e)
    expect((missing as ApiError).status).toBe(404)
  })
})
