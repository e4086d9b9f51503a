/**
 * Codex treats a context overflow through the gateway as a context-window error, as it does
 * direct (issue 26). Direct, a Responses server answers every turn `400` with code
 * `context_length_exceeded`; through the gateway the overflow comes from a native Messages
 * upstream (`prompt is too long: N tokens > M maximum`). Codex must fail the turn the same way in
 * both: its context-window message, not the gateway's generic refusal.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { messagesError, startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { describeCodexRun, disposeAllCodex, NO_RETRIES, runCodex, type CodexRun } from "../support/Codex.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-codex-overflow-key"

let direct: Server
let directUrl: string
let native: FakeMessagesUpstream
let gateway: TestGateway

beforeAll(async () => {
  // what OpenAI's Responses API answers a prompt past the context window with
  direct = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      res.writeHead(400, { "content-type": "application/json" })
      res.end(JSON.stringify({ error: { message: "Your input exceeds the context window of this model. Please adjust your input and try again.", type: "invalid_request_error", param: "input", code: "context_length_exceeded" } }))
    })
  })
  await new Promise<void>((resolve) => direct.listen(0, "127.0.0.1", resolve))
  directUrl = `http://127.0.0.1:${(direct.address() as AddressInfo).port}`
  native = await startFakeMessagesUpstream()
  native.onRequest(() => messagesError(400, "invalid_request_error", "prompt is too long: 250123 tokens > 200000 maximum"))
  gateway = await startGateway({
    keys: [{ key: KEY, app: "codex" }],
    providers: { ant: { type: "anthropic", baseUrl: native.url, apiKey: "upstream-key" } },
    aliases: { "gpt-5.5": "ant/claude-opus-4-8" }
  })
})

afterEach(async () => {
  await disposeAllCodex()
})

afterAll(async () => {
  await gateway?.close()
  await native?.close()
  await new Promise<void>((resolve) => direct?.close(() => resolve()))
})

/** The error events of a run (`error` and `turn.failed`), as Codex reports them. */
const errors = (run: CodexRun) => run.events.filter((e) => e.type === "error" || e.type === "turn.failed")

describe("Codex and a context overflow", () => {
  it("fails the turn with its context-window error, direct and through the gateway alike", async () => {
    const straight = await runCodex({ baseUrl: directUrl, prompt: "Summarise everything", provider: NO_RETRIES })
    const through = await runCodex({ baseUrl: gateway.url, apiKey: KEY, prompt: "Summarise everything", provider: NO_RETRIES })
    try {
      const expected = errors(straight)
      expect(expected.length, describeCodexRun(straight)).toBeGreaterThan(0)
      // Codex's own words for a context-window error, not the upstream's
      expect(JSON.stringify(expected), describeCodexRun(straight)).toMatch(/context window/i)
      expect(errors(through), describeCodexRun(through)).toEqual(expected)
      expect(through.exitCode).toBe(straight.exitCode)
    } finally {
      await straight.dispose()
      await through.dispose()
    }
  }, 180_000)
})
