/**
 * The real Claude Code CLI (`@anthropic-ai/claude-code`, `claude -p`) through the gateway's
 * Messages API, against two scripted upstreams on loopback: a chat-completions one (`openai`
 * provider type) and a native Messages one (`anthropic` provider type). For each: a plain answer,
 * a Bash tool round trip, and what becomes of Claude Code's thinking (replayed intact with its
 * signature on the native upstream, never sent to the chat-completions one).
 *
 * Claude Code 2.1.x sends `HEAD /` first (the gateway's 404 is fine), then one streamed
 * `POST /v1/messages?beta=true` per turn with the bare model id (`claude-opus-4-8` by default;
 * glob alias `claude-*` maps it), `thinking: {type: "adaptive"}` + `output_config.effort` by
 * default, ~24 tools, `context_management`, `metadata.user_id`, `cache_control` blocks and a
 * `role: "system"` entry inside `messages`.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { chatSse, openAiError, startFakeUpstream, type FakeUpstream, type RecordedRequest as ChatRequest } from "../support/FakeUpstream.js"
import { messageSse, messagesError, startFakeMessagesUpstream, type FakeMessagesUpstream, type RecordedRequest as NativeRequest } from "../support/FakeMessagesUpstream.js"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode, type ClaudeCodeRun } from "../support/ClaudeCode.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-claude-code-gateway-key"
const BASH_INPUT = { command: "echo gateway-bash-ok", description: "echo" }
const SIGNATURE = "sig-claude-code"
/**
 * Passed with `--model` (Claude Code's default today): Claude Code sends `thinking: {type:
 * "adaptive"}` + `output_config: {effort: "high"}` for it. The gateway only thinks with a model
 * that has variants with a `reasoningEffort` (without them it drops thinking and answers with
 * `x-gateway-thinking: unavailable`), so the providers declare this model with variants.
 */
const MODEL = "claude-opus-4-8"
const THINKING_VARIANTS = { variants: { low: { reasoningEffort: "low" }, medium: { reasoningEffort: "medium" }, high: { reasoningEffort: "high" } } }

// ---------------------------------------------------------------------------------------------
// Wire shapes seen by the upstreams
// ---------------------------------------------------------------------------------------------

interface ChatMessage {
  readonly role: string
  readonly content?: unknown
  readonly tool_call_id?: string
  readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
  readonly [key: string]: unknown
}
interface ChatBody {
  readonly model: string
  readonly stream?: boolean
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string } }>
  readonly [key: string]: unknown
}
interface NativeBlock {
  readonly type: string
  readonly [key: string]: unknown
}
interface NativeBody {
  readonly model: string
  readonly stream?: boolean
  readonly thinking?: { readonly type: string }
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string | ReadonlyArray<NativeBlock> }>
  readonly tools?: ReadonlyArray<{ readonly name: string }>
  readonly [key: string]: unknown
}

const asChat = (r: ChatRequest): ChatBody => r.body as ChatBody
const asNative = (r: NativeRequest): NativeBody => r.body as NativeBody
const text = (content: unknown): string => (typeof content === "string" ? content : JSON.stringify(content))
const blocksOf = (content: string | ReadonlyArray<NativeBlock>): ReadonlyArray<NativeBlock> => (typeof content === "string" ? [{ type: "text", text: content }] : content)

/** Calls of Claude Code's main conversation (the ones offering its Bash tool). */
const chatMainCalls = (up: FakeUpstream): ChatBody[] =>
  up.requests.filter((r) => r.method === "POST" && r.path === "/v1/chat/completions").map(asChat).filter((b) => (b.tools ?? []).some((t) => t.function.name === "Bash"))
const nativeMainCalls = (up: FakeMessagesUpstream): NativeBody[] =>
  up.requests.filter((r) => r.method === "POST" && r.path === "/v1/messages").map(asNative).filter((b) => (b.tools ?? []).some((t) => t.name === "Bash"))

/** The content blocks of the assistant messages in Claude Code's stream-json output. */
const assistantBlocks = (run: ClaudeCodeRun): NativeBlock[] =>
  run.events
    .filter((e) => e.type === "assistant")
    .flatMap((e) => ((e.message as { content?: NativeBlock[] } | undefined)?.content ?? []))

const describeRequests = (requests: ReadonlyArray<{ method: string; url: string; rawBody: string }>): string =>
  requests.map((r) => `${r.method} ${r.url} ${r.rawBody.length}B`).join("\n")

const check = async (run: ClaudeCodeRun, body: () => void): Promise<void> => {
  try {
    body()
  } finally {
    await run.dispose()
  }
}

afterEach(async () => {
  await disposeAllClaudeCode()
})

// ---------------------------------------------------------------------------------------------
// (a) chat-completions upstream (`openai` provider type)
// ---------------------------------------------------------------------------------------------

describe("Claude Code through the gateway to a chat-completions upstream", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "claude-code" }],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-key", models: { [MODEL]: THINKING_VARIANTS } } },
      // Claude Code sends bare model ids (claude-opus-4-8, claude-haiku-...): the operator maps them
      aliases: { "claude-*": "up/claude-*" }
    })
  })
  afterEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  /** Text for anything that is not a POST to chat completions' first main-conversation turn. */
  const answer = (main: (body: ChatBody) => ReturnType<typeof chatSse>) => (req: ChatRequest) => {
    if (req.method !== "POST" || req.path !== "/v1/chat/completions") return openAiError(404, `no route ${req.method} ${req.path}`)
    const body = asChat(req)
    if (!(body.tools ?? []).some((t) => t.function.name === "Bash")) return chatSse({ content: "side answer" })
    return main(body)
  }

  it("answers a plain prompt", async () => {
    upstream.onRequest(answer(() => chatSse({ content: "Hello from the chat upstream" })))
    const run = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Say hello", model: MODEL })
    await check(run, () => {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      expect(run.resultText, describeClaudeCodeRun(run)).toBe("Hello from the chat upstream")
      const main = chatMainCalls(upstream)
      expect(main, describeRequests(upstream.requests)).toHaveLength(1)
      expect(main[0].model).toMatch(/^claude-/)
      expect(main[0].stream).toBe(true)
      expect(main[0].messages[0].role).toBe("system")
      expect(text(main[0].messages[main[0].messages.length - 1].content)).toContain("Say hello")
    })
  }, 90_000)

  it("runs a Bash tool round trip, and no reasoning reaches the upstream", async () => {
    upstream.onRequest(
      answer((body) =>
        body.messages.some((m) => m.role === "tool")
          ? chatSse({ content: "The command printed gateway-bash-ok." })
          : chatSse({ reasoning: "I will run echo.", toolCalls: [{ id: "call_bash_1", name: "Bash", arguments: JSON.stringify(BASH_INPUT) }] })
      )
    )
    const run = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Run the echo command", allowedTools: ["Bash(echo:*)"], model: MODEL })
    await check(run, () => {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      expect(run.resultText, describeClaudeCodeRun(run)).toBe("The command printed gateway-bash-ok.")
      const main = chatMainCalls(upstream)
      expect(main, describeRequests(upstream.requests)).toHaveLength(2)
      const second = main[1]
      // the gateway hands the call to Claude Code as a `toolu_`-prefixed id and replays that id upstream
      const call = second.messages.find((m) => m.tool_calls?.some((c) => c.function.name === "Bash"))
      const callId = call?.tool_calls?.[0].id
      expect(callId).toMatch(/call_bash_1$/)
      expect(JSON.parse(call?.tool_calls?.[0].function.arguments ?? "{}")).toEqual(BASH_INPUT)
      const result = second.messages.find((m) => m.role === "tool" && m.tool_call_id === callId)
      expect(result && text(result.content)).toContain("gateway-bash-ok")
      // thinking is dropped on the way to a chat-completions upstream: no reasoning field on any message
      for (const m of second.messages) {
        expect(m).not.toHaveProperty("reasoning_content")
        expect(m).not.toHaveProperty("reasoning")
        expect(m).not.toHaveProperty("thinking")
        expect(text(m.content)).not.toContain("I will run echo.")
      }
      expect(second).not.toHaveProperty("thinking")
      // Claude Code's thinking request (adaptive, effort high) became the model's "high" variant
      expect(main.map((b) => b.reasoning_effort)).toEqual(["high", "high"])
      // Claude Code itself saw the upstream's reasoning as an (unsigned) thinking block
      expect(assistantBlocks(run).find((b) => b.type === "thinking")).toMatchObject({ thinking: "I will run echo." })
    })
  }, 90_000)
})

// ---------------------------------------------------------------------------------------------
// (b) native Messages upstream (`anthropic` provider type)
// ---------------------------------------------------------------------------------------------

describe("Claude Code through the gateway to a native Messages upstream", () => {
  let upstream: FakeMessagesUpstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeMessagesUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "claude-code" }],
      providers: { ant: { type: "anthropic", baseUrl: upstream.origin, apiKey: "upstream-secret", models: { [MODEL]: THINKING_VARIANTS } } },
      aliases: { "claude-*": "ant/claude-*" }
    })
  })
  afterEach(() => upstream.reset())
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  const answer = (main: (body: NativeBody) => ReturnType<typeof messageSse>) => (req: NativeRequest) => {
    if (req.method !== "POST" || req.path !== "/v1/messages") return messagesError(404, "not_found_error", `no route ${req.method} ${req.path}`)
    const body = asNative(req)
    if (!(body.tools ?? []).some((t) => t.name === "Bash")) return messageSse({ blocks: [{ type: "text", text: "side answer" }] })
    return main(body)
  }

  it("answers a plain prompt", async () => {
    upstream.onRequest(answer(() => messageSse({ blocks: [{ type: "text", text: "Hello from the native upstream" }] })))
    const run = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Say hello", model: MODEL })
    await check(run, () => {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      expect(run.resultText, describeClaudeCodeRun(run)).toBe("Hello from the native upstream")
      const main = nativeMainCalls(upstream)
      expect(main, describeRequests(upstream.requests)).toHaveLength(1)
      expect(main[0].model).toMatch(/^claude-/)
      expect(main[0].stream).toBe(true)
      // Claude Code asks for adaptive thinking with effort "high": the model's "high" variant runs
      expect(main[0].thinking).toEqual({ type: "enabled", budget_tokens: 16384 })
      const last = main[0].messages[main[0].messages.length - 1]
      expect(text(last.content)).toContain("Say hello")
    })
  }, 90_000)

  it("runs a Bash tool round trip and replays the signed thinking intact", async () => {
    upstream.onRequest(
      answer((body) =>
        body.messages.some((m) => blocksOf(m.content).some((b) => b.type === "tool_result"))
          ? messageSse({ blocks: [{ type: "text", text: "The command printed gateway-bash-ok." }] })
          : messageSse({
              blocks: [
                { type: "thinking", thinking: "I should run the echo command.", signature: SIGNATURE },
                { type: "tool_use", id: "toolu_bash_1", name: "Bash", input: BASH_INPUT }
              ]
            })
      )
    )
    const run = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Run the echo command", allowedTools: ["Bash(echo:*)"], model: MODEL })
    await check(run, () => {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      expect(run.resultText, describeClaudeCodeRun(run)).toBe("The command printed gateway-bash-ok.")
      const main = nativeMainCalls(upstream)
      expect(main, describeRequests(upstream.requests)).toHaveLength(2)
      const second = main[1]
      const assistant = second.messages.find((m) => m.role === "assistant" && blocksOf(m.content).some((b) => b.type === "tool_use"))
      const blocks = blocksOf(assistant?.content ?? [])
      // the signed thinking block comes back intact, before the tool_use
      const thinking = blocks.find((b) => b.type === "thinking")
      expect(thinking).toEqual({ type: "thinking", thinking: "I should run the echo command.", signature: SIGNATURE })
      expect(blocks.findIndex((b) => b.type === "thinking")).toBeLessThan(blocks.findIndex((b) => b.type === "tool_use"))
      expect(blocks.find((b) => b.type === "tool_use")).toMatchObject({ id: "toolu_bash_1", name: "Bash", input: BASH_INPUT })
      // Claude Code got the signed thinking block through the gateway as it was sent
      expect(assistantBlocks(run).find((b) => b.type === "thinking")).toEqual({ type: "thinking", thinking: "I should run the echo command.", signature: SIGNATURE })
      const result = second.messages.flatMap((m) => blocksOf(m.content)).find((b) => b.type === "tool_result" && b.tool_use_id === "toolu_bash_1")
      expect(text(result?.content)).toContain("gateway-bash-ok")
    })
  }, 90_000)
})
