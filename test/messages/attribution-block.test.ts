/**
 * Claude Code's attribution block stays first (issue 26). Claude Code sends
 * `x-anthropic-billing-header: ...` as the first system block; the first-party API strips it only
 * there. Through the gateway it must reach a native upstream first and byte-identical, an app's
 * system policy right after it, and the gateway's own cache breakpoints elsewhere.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { messageJson, messageSse, startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode } from "../support/ClaudeCode.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-attribution-policy"
const PLAIN_KEY = "sk-attribution-plain"
const POLICY = "Team policy: answer in English."
const BILLING = "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=sdk-cli;  cch=00000;"

type SystemBlock = { type: string; text: string; cache_control?: { type: string; ttl?: string } }

let native: FakeMessagesUpstream
let gateway: TestGateway

beforeAll(async () => {
  native = await startFakeMessagesUpstream()
  native.onRequest((req) => ((req.body as { stream?: unknown }).stream === true ? messageSse({ blocks: [{ type: "text", text: "ok" }] }) : messageJson({ blocks: [{ type: "text", text: "ok" }] })))
  gateway = await startGateway({
    keys: [
      { key: KEY, app: "with-policy" },
      { key: PLAIN_KEY, app: "plain" }
    ],
    providers: { ant: { type: "anthropic", baseUrl: native.url, apiKey: "upstream-key" } },
    aliases: { "claude-*": "ant/claude-*" },
    apps: { "with-policy": { system: POLICY } }
  })
})

afterEach(async () => {
  await disposeAllClaudeCode()
})

afterAll(async () => {
  await gateway?.close()
  await native?.close()
})

const send = async (key: string, system: unknown) => {
  const before = native.requests.length
  const response = await fetch(`${gateway.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
    body: JSON.stringify({ model: "claude-haiku-4-5", max_tokens: 64, system, messages: [{ role: "user", content: "hi" }] })
  })
  expect(response.status, await response.text()).toBe(200)
  expect(native.requests.length).toBe(before + 1)
  return (native.requests[before].body as { system: Array<SystemBlock> }).system
}

describe("the attribution block", () => {
  it("stays first and byte-identical, the app policy right after it, no gateway breakpoint on it", async () => {
    const system = await send(KEY, [
      { type: "text", text: BILLING },
      { type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } },
      { type: "text", text: "Long instructions." }
    ])
    expect(system.map((b) => b.text)).toEqual([BILLING, POLICY, "You are Claude Code.", "Long instructions."])
    expect(system[0]).toEqual({ type: "text", text: BILLING })
    // the gateway's first-system and last-system breakpoints fall on the blocks after it
    expect(system[3].cache_control).toEqual({ type: "ephemeral" })
    expect(system[2].cache_control).toEqual({ type: "ephemeral" })
  })

  it("alone in the system prompt, it gets no breakpoint either; without it the policy leads", async () => {
    const alone = await send(PLAIN_KEY, [{ type: "text", text: BILLING }])
    expect(alone).toEqual([{ type: "text", text: BILLING }])
    const without = await send(KEY, [{ type: "text", text: "You are a helper." }])
    expect(without.map((b) => b.text)).toEqual([POLICY, "You are a helper."])
    // a block that only mentions the header later in its text is not an attribution block
    const later = await send(KEY, [{ type: "text", text: `Note: ${BILLING}` }])
    expect(later.map((b) => b.text)).toEqual([POLICY, `Note: ${BILLING}`])
  })

  it("the real Claude Code's block reaches the upstream first, as Claude Code sends it direct, and so do its beta flags", async () => {
    const direct = await runClaudeCode({ baseUrl: native.url.replace(/\/v1$/, ""), apiKey: "upstream-key", prompt: "Say ok", model: "claude-haiku-4-5" })
    const directRequest = native.requests.length - 1
    const via = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Say ok", model: "claude-haiku-4-5" })
    try {
      expect(direct.exitCode, describeClaudeCodeRun(direct)).toBe(0)
      expect(via.exitCode, describeClaudeCodeRun(via)).toBe(0)
      const sent = (native.requests[directRequest].body as { system: Array<SystemBlock> }).system
      const received = (native.requests[native.requests.length - 1].body as { system: Array<SystemBlock> }).system
      expect(sent[0].text.startsWith("x-anthropic-billing-header:")).toBe(true)
      expect(received[0]).toEqual(sent[0])
      expect(received[1]).toEqual({ type: "text", text: POLICY })
      // every beta flag Claude Code sends direct reaches the upstream through the gateway too (none is on the deny-list)
      const directBetas = native.requests[directRequest].headers["anthropic-beta"]
      expect(String(directBetas).split(",").length).toBeGreaterThanOrEqual(3)
      expect(native.requests[native.requests.length - 1].headers["anthropic-beta"]).toBe(directBetas)
      // Claude Code's own blocks follow, one for one (their text names each run's temp dirs)
      expect(received.length).toBe(sent.length + 1)
      expect(received[2].text.slice(0, 40)).toBe(sent[1].text.slice(0, 40))
    } finally {
      await direct.dispose()
      await via.dispose()
    }
  })
})
