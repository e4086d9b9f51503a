/**
 * Claude Code sees a context overflow through the gateway as it sees it direct (issue 26): its
 * main turn refused by the upstream for a prompt past the context window. Direct, a native
 * Messages upstream answers every model call with `400 prompt is too long: N tokens > M maximum`; through the gateway
 * the same refusal comes from a native upstream, and from a chat-completions upstream as
 * `context_length_exceeded`: Claude Code must end the run the same way in all three, with the
 * words it matches (`prompt is too long`) and not the gateway's generic refusal.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { chatSse, openAiError, startFakeUpstream, type FakeUpstream, type RecordedRequest as ChatRequest } from "../support/FakeUpstream.js"
import { messageSse, messagesError, startFakeMessagesUpstream, type FakeMessagesUpstream, type RecordedRequest as NativeRequest } from "../support/FakeMessagesUpstream.js"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode, type ClaudeCodeRun } from "../support/ClaudeCode.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-claude-code-overflow-key"
const MODEL = "claude-haiku-4-5"
const TOKENS = 250123
const MAXIMUM = 200000

let native: FakeMessagesUpstream
let chat: FakeUpstream
let gateway: TestGateway

beforeAll(async () => {
  native = await startFakeMessagesUpstream()
  chat = await startFakeUpstream()
  native.onRequest((req: NativeRequest) =>
    req.method === "POST" && req.path === "/v1/messages"
      ? messagesError(400, "invalid_request_error", `prompt is too long: ${TOKENS} tokens > ${MAXIMUM} maximum`)
      : messageSse({ blocks: [{ type: "text", text: "side answer" }] })
  )
  chat.onRequest((req: ChatRequest) =>
    req.method === "POST"
      ? openAiError(400, `This model's maximum context length is ${MAXIMUM} tokens. However, your messages resulted in ${TOKENS} tokens.`, "invalid_request_error", "context_length_exceeded")
      : chatSse({ content: "side answer" })
  )
  gateway = await startGateway({
    keys: [{ key: KEY, app: "claude-code" }],
    providers: { ant: { type: "anthropic", baseUrl: native.url, apiKey: "upstream-key" }, oai: { type: "openai", baseUrl: chat.url, apiKey: "upstream-key" } },
    aliases: { "claude-haiku-*": "ant/claude-haiku-*", "claude-opus-*": "oai/claude-opus-*" }
  })
})

afterEach(async () => {
  await disposeAllClaudeCode()
})

afterAll(async () => {
  await gateway?.close()
  await native?.close()
  await chat?.close()
})

/**
 * What a run ended with, as Claude Code reports it: the result event's text and error flag. The
 * text counts the run's own conversation (`only ~N tokens`), which differs by model: not compared.
 */
const outcome = (run: ClaudeCodeRun) => ({
  result: run.resultText?.replace(/only ~\d+ tokens/, "only ~N tokens"),
  isError: run.resultEvent?.is_error,
  subtype: run.resultEvent?.subtype
})

describe("Claude Code and a context overflow", () => {
  it("ends the run the same way direct and through the gateway, from a native and from a chat-completions upstream", async () => {
    const direct = await runClaudeCode({ baseUrl: native.url.replace(/\/v1$/, ""), apiKey: "upstream-key", prompt: "Summarise everything", model: MODEL })
    const viaNative = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Summarise everything", model: MODEL })
    const viaChat = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Summarise everything", model: "claude-opus-4-8" })
    try {
      const expected = outcome(direct)
      // what Claude Code makes of the refusal direct: its own overflow report, the upstream's numbers in it
      expect(expected.isError, describeClaudeCodeRun(direct)).toBe(true)
      expect(String(expected.result), describeClaudeCodeRun(direct)).toMatch(new RegExp(`^Prompt is too long .*~${TOKENS} tokens \\(limit ${MAXIMUM}\\)`))
      expect(outcome(viaNative), describeClaudeCodeRun(viaNative)).toEqual(expected)
      expect(outcome(viaChat), describeClaudeCodeRun(viaChat)).toEqual(expected)
      expect(viaChat.exitCode).toBe(direct.exitCode)
    } finally {
      await direct.dispose()
      await viaNative.dispose()
      await viaChat.dispose()
    }
  }, 180_000)
})
