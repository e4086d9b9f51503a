/**
 * The real Codex CLI over the Responses WebSocket (issue 26): with a provider that allows it
 * (`supports_websockets = true`) Codex opens `GET /v1/responses` with `Upgrade: websocket` and
 * sends every turn over the one socket; with the gateway's `responsesWebSocket: false` the upgrade
 * is answered 426 and Codex goes to HTTP at once, without its retries and fallback warning.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { chatSse, startFakeUpstream, type FakeUpstream, type RecordedRequest } from "../support/FakeUpstream.js"
import { codexAnswer, describeCodexRun, disposeAllCodex, runCodex } from "../support/Codex.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-codex-websocket-key"
const WEBSOCKETS = { supports_websockets: true, request_max_retries: 0, stream_max_retries: 0 }

let upstream: FakeUpstream
let on: TestGateway
let off: TestGateway

const document = (responsesWebSocket: boolean) => ({
  keys: [{ key: KEY, app: "codex" }],
  providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-key" } },
  aliases: { "gpt-5.5": "up/gpt-test" },
  responsesWebSocket
})

beforeAll(async () => {
  upstream = await startFakeUpstream()
  on = await startGateway(document(true))
  off = await startGateway(document(false))
})

afterEach(async () => {
  await disposeAllCodex()
  upstream.reset()
})

afterAll(async () => {
  await on?.close()
  await off?.close()
  await upstream?.close()
})

/** How many requests the gateway answered per route label and status (its `/gateway/metrics`; without adminKey an app key reads them). */
const routeCounts = async (gw: TestGateway): Promise<Record<string, number>> => {
  const text = await (await fetch(`${gw.url}/gateway/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text()
  const counts: Record<string, number> = {}
  for (const line of text.split("\n")) {
    const match = /^gateway_requests_total\{[^}]*route="([^"]+)",status="(\d+)"\} (\d+)/.exec(line)
    if (match !== null) counts[`${match[1]} ${match[2]}`] = (counts[`${match[1]} ${match[2]}`] ?? 0) + Number(match[3])
  }
  return counts
}

const messagesOf = (r: RecordedRequest | undefined) => ((r?.body as { messages?: ReadonlyArray<{ role: string; tool_call_id?: string; content?: unknown }> } | undefined)?.messages ?? [])

describe("Codex over the Responses WebSocket", () => {
  it("runs a text turn and a tool-call turn over the socket, with no fallback to HTTP", async () => {
    upstream.onRequest((_req, index) =>
      index === 0 ? chatSse({ toolCalls: [{ id: "call_ws_1", name: "exec_command", arguments: JSON.stringify({ cmd: "echo over-the-socket" }) }] }) : chatSse({ content: "Socket done." })
    )
    const run = await runCodex({ baseUrl: on.url, apiKey: KEY, prompt: "Echo a marker", provider: WEBSOCKETS })
    try {
      expect(run.exitCode, describeCodexRun(run)).toBe(0)
      expect(codexAnswer(run)).toBe("Socket done.")
      expect(run.stderr).not.toMatch(/Falling back from WebSockets/i)
      // the tool call's output reached the model on the second turn
      expect(upstream.requests).toHaveLength(2)
      const output = messagesOf(upstream.requests[1]).find((m) => m.role === "tool" && m.tool_call_id === "call_ws_1")
      expect(JSON.stringify(output?.content)).toContain("over-the-socket")
      // one upgrade carried both turns (101, counted when the socket closed): no POST /v1/responses at all
      expect(await routeCounts(on)).toEqual({ "responses.websocket 101": 1 })
    } finally {
      await run.dispose()
    }
  }, 90_000)

  it("with the feature off, the upgrade is 426 and Codex goes to HTTP at once", async () => {
    upstream.onRequest(() => chatSse({ content: "Over HTTP." }))
    const run = await runCodex({ baseUrl: off.url, apiKey: KEY, prompt: "Say hello", provider: WEBSOCKETS })
    try {
      expect(run.exitCode, describeCodexRun(run)).toBe(0)
      expect(codexAnswer(run)).toBe("Over HTTP.")
      expect(run.stderr).not.toMatch(/Falling back from WebSockets/i)
      // one upgrade refused (no retries), then the turn over HTTP
      expect(await routeCounts(off)).toEqual({ "responses.websocket 426": 1, "responses.create 200": 1 })
    } finally {
      await run.dispose()
    }
  }, 90_000)
})
