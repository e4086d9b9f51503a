/**
 * The real Gemini CLI (`@google/gemini-cli`, `gemini -p`) through the gateway's Gemini-style API,
 * against a scripted chat-completions upstream (`openai` provider type) and a scripted native
 * generate-content upstream (`gemini` provider type): a plain answer, a read-only tool round trip
 * (`list_directory`, whose functionResponse must reach the upstream as the tool result), and the
 * CLI's routing call (no `-m`: a `:generateContent` with an upper-case `responseJsonSchema`) that
 * must get JSON matching the schema, or the CLI falls back to another main model.
 *
 * What the CLI sends is recorded in scratchpad/gemini-capture/FINDINGS.md: `x-goog-api-key`,
 * `:streamGenerateContent?alt=sse` per turn with `systemInstruction`, `parametersJsonSchema`
 * tools and `thinkingConfig`; resent calls carry an `id` and `thoughtSignature`.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream, type RecordedRequest as ChatRequest } from "../support/FakeUpstream.js"
import { generateJson, generateSse, startFakeGeminiUpstream, type FakeGeminiUpstream, type RecordedRequest as NativeRequest } from "../support/FakeGeminiUpstream.js"
import { describeGeminiCliRun, disposeAllGeminiCli, runGeminiCli } from "../support/GeminiCli.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-gemini-cli-gateway-key"
const MODEL = "gemini-2.5-flash"
/** the model the CLI picks after a routing answer with a score under 90 */
const ROUTED_FLASH = "3.8-flash"

/** What the tests need from either upstream, in its own wire format. */
interface Upstream {
  readonly providerConfig: Record<string, unknown>
  /** answer every request: routing calls with `routing`, a turn without a tool result with `firstTurn`, the next with text */
  readonly serve: (options: { readonly firstTurnCall?: { readonly name: string; readonly args: Record<string, unknown> }; readonly routing?: Record<string, unknown> }) => void
  /** per request: the upstream model, whether it was a routing call, and the tool results it carried */
  readonly seen: () => ReadonlyArray<{ readonly model: string; readonly routing: boolean; readonly toolResults: ReadonlyArray<string>; readonly toolNames: ReadonlyArray<string>; readonly callSignatures: ReadonlyArray<unknown> }>
  /** the signature the upstream puts on its call, which must come back on that call (native only) */
  readonly callSignature?: string
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const FINAL = "All done from upstream"

const chatUpstream = async (): Promise<Upstream> => {
  const up: FakeUpstream = await startFakeUpstream()
  const body = (r: ChatRequest) => r.body as { model: string; messages: Array<any>; tools?: Array<any> }
  const isRouting = (r: ChatRequest) => (body(r).tools ?? []).some((t) => t.function?.name === "respond")
  return {
    providerConfig: { type: "openai", baseUrl: up.url, apiKey: "k" },
    serve: ({ firstTurnCall, routing }) =>
      up.onRequest((r) => {
        if (isRouting(r)) return chatJson({ toolCalls: [{ id: "route", name: "respond", arguments: JSON.stringify(routing ?? {}) }] })
        const answered = body(r).messages.some((m) => m.role === "tool")
        if (firstTurnCall !== undefined && !answered) return chatSse({ toolCalls: [{ id: "up-call-1", name: firstTurnCall.name, arguments: JSON.stringify(firstTurnCall.args) }] })
        return chatSse({ content: FINAL })
      }),
    seen: () =>
      up.requests.map((r) => ({
        model: body(r).model,
        routing: isRouting(r),
        toolResults: body(r).messages.filter((m) => m.role === "tool").map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content))),
        toolNames: (body(r).tools ?? []).map((t) => t.function.name),
        callSignatures: []
      })),
    reset: () => up.reset(),
    close: () => up.close()
  }
}

const nativeUpstream = async (): Promise<Upstream> => {
  const up: FakeGeminiUpstream = await startFakeGeminiUpstream()
  const body = (r: NativeRequest) => r.body as { contents: Array<any>; tools?: Array<any>; toolConfig?: any }
  const declared = (r: NativeRequest): Array<string> => (body(r).tools ?? []).flatMap((t) => (t.functionDeclarations ?? []).map((d: any) => d.name))
  const isRouting = (r: NativeRequest) => declared(r).includes("respond")
  const results = (r: NativeRequest) => body(r).contents.flatMap((c) => c.parts.filter((p: any) => p.functionResponse).map((p: any) => JSON.stringify(p.functionResponse.response)))
  return {
    providerConfig: { type: "gemini", baseUrl: up.origin, apiKey: "k" },
    callSignature: "native-sig",
    serve: ({ firstTurnCall, routing }) =>
      up.onRequest((r) => {
        if (isRouting(r)) return generateJson({ text: "", calls: [{ name: "respond", args: routing ?? {} }] })
        if (firstTurnCall !== undefined && results(r).length === 0) return generateSse({ text: "", calls: [{ name: firstTurnCall.name, args: firstTurnCall.args }], signature: "native-sig" })
        return generateSse({ text: FINAL })
      }),
    seen: () =>
      up.requests.map((r) => ({
        model: /\/models\/([^:]+):/.exec(r.path)?.[1] ?? "",
        routing: isRouting(r),
        toolResults: results(r),
        toolNames: declared(r),
        callSignatures: body(r).contents.flatMap((c) => c.parts.filter((p: any) => p.functionCall).map((p: any) => p.thoughtSignature))
      })),
    reset: () => up.reset(),
    close: () => up.close()
  }
}

describe.each([
  ["a chat-completions upstream", chatUpstream],
  ["a native generate-content upstream", nativeUpstream]
])("Gemini CLI through the gateway and %s", (_name, makeUpstream) => {
  let upstream: Upstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await makeUpstream()
    gateway = await startGateway({ keys: [{ key: KEY, app: "gemini-cli" }], providers: { up: upstream.providerConfig }, aliases: { "gemini-*": "up/*" } })
  })
  beforeEach(() => upstream.reset())
  afterEach(disposeAllGeminiCli)
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("completes a plain answer", async () => {
    upstream.serve({})
    const run = await runGeminiCli({ baseUrl: gateway.url, apiKey: KEY, model: MODEL, prompt: "Say hello" })
    try {
      expect(run.exitCode, describeGeminiCliRun(run)).toBe(0)
      expect(run.responseText).toBe(FINAL)
      expect(upstream.seen().map((s) => s.model)).toEqual(["2.5-flash"])
    } finally {
      await run.dispose()
    }
  }, 60_000)

  it("runs a read-only tool and its functionResponse reaches the upstream as the tool result", async () => {
    upstream.serve({ firstTurnCall: { name: "list_directory", args: { dir_path: "." } } })
    const run = await runGeminiCli({ baseUrl: gateway.url, apiKey: KEY, model: MODEL, prompt: "List the files here", files: { "alpha.txt": "a\n", "beta.txt": "b\n" } })
    try {
      expect(run.exitCode, describeGeminiCliRun(run)).toBe(0)
      expect(run.responseText).toBe(FINAL)
      const seen = upstream.seen()
      expect(seen).toHaveLength(2)
      expect(seen[0].toolNames).toContain("list_directory")
      expect(seen[0].toolResults).toEqual([])
      expect(seen[1].toolResults).toHaveLength(1)
      expect(seen[1].toolResults[0]).toContain("alpha.txt")
      expect(seen[1].toolResults[0]).toContain("beta.txt")
      // the upstream's signature went to the CLI on its call and came back on that call
      expect(seen[1].callSignatures).toEqual(upstream.callSignature === undefined ? [] : [upstream.callSignature])
    } finally {
      await run.dispose()
    }
  }, 60_000)

  it("answers the routing call with JSON matching its responseJsonSchema, so the CLI keeps the routed model", async () => {
    upstream.serve({ routing: { complexity_reasoning: "a greeting is simple", complexity_score: 10 } })
    const run = await runGeminiCli({ baseUrl: gateway.url, apiKey: KEY, prompt: "Say hello" })
    try {
      expect(run.exitCode, describeGeminiCliRun(run)).toBe(0)
      expect(run.responseText).toBe(FINAL)
      const seen = upstream.seen()
      expect(seen[0].routing).toBe(true)
      // a score under 90 picks the flash model; an unreadable routing answer would fall back to a pro model
      expect(seen.filter((s) => !s.routing).map((s) => s.model)).toEqual([ROUTED_FLASH])
    } finally {
      await run.dispose()
    }
  }, 60_000)
})
