/**
 * The real Codex CLI over the Responses WebSocket (issue 26): with a provider that allows it
 * (`supports_websockets = true`) Codex opens `GET /v1/responses` with `Upgrade: websocket` and
 * sends every turn over the one socket; with the gateway's `responsesWebSocket: false` the upgrade
 * is answered 426 and Codex goes to HTTP at once, without its retries and fallback warning.
 */
import * as net from "node:net"
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

/**
 * A loopback proxy in front of a gateway that keeps every byte the client sent. The client's Host
 * (the proxy's port) is rewritten to the gateway's, which the edge checks.
 */
const recordingProxy = async (gw: TestGateway): Promise<{ readonly url: string; readonly sent: () => Buffer; readonly close: () => Promise<void> }> => {
  const chunks: Array<Buffer> = []
  const sockets = new Set<net.Socket>()
  let port = 0
  const server = net.createServer((client) => {
    const upstreamSocket = net.connect(gw.port, "127.0.0.1")
    for (const socket of [client, upstreamSocket]) {
      sockets.add(socket)
      socket.on("error", () => socket.destroy())
      socket.on("close", () => sockets.delete(socket))
    }
    client.on("data", (chunk: Buffer) => {
      chunks.push(chunk)
      upstreamSocket.write(chunk.toString("latin1").includes(`127.0.0.1:${port}\r\n`) ? Buffer.from(chunk.toString("latin1").replace(`127.0.0.1:${port}\r\n`, `127.0.0.1:${gw.port}\r\n`), "latin1") : chunk)
    })
    upstreamSocket.pipe(client)
    client.on("close", () => upstreamSocket.destroy())
    upstreamSocket.on("close", () => client.destroy())
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  port = (server.address() as net.AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    sent: () => Buffer.concat(chunks),
    close: () => {
      for (const socket of sockets) socket.destroy()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}

/** The text messages of a client's WebSocket byte stream (after its upgrade request): masked frames, fragments joined. */
const clientTextMessages = (bytes: Buffer): Array<string> => {
  let at = bytes.indexOf("\r\n\r\n") + 4
  const messages: Array<string> = []
  let pieces: Array<Buffer> = []
  while (at + 2 <= bytes.length) {
    const fin = (bytes[at] & 0x80) !== 0
    const opcode = bytes[at] & 0x0f
    let length = bytes[at + 1] & 0x7f
    const masked = (bytes[at + 1] & 0x80) !== 0
    at += 2
    if (length === 126) {
      length = bytes.readUInt16BE(at)
      at += 2
    } else if (length === 127) {
      length = Number(bytes.readBigUInt64BE(at))
      at += 8
    }
    const mask = masked ? bytes.subarray(at, at + 4) : undefined
    if (masked) at += 4
    if (at + length > bytes.length) break
    const payload = Buffer.from(bytes.subarray(at, at + length))
    at += length
    if (mask !== undefined) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i % 4]
    if (opcode === 0x1 || opcode === 0x0) pieces.push(payload)
    if (fin && (opcode === 0x1 || opcode === 0x0)) {
      messages.push(Buffer.concat(pieces).toString("utf8"))
      pieces = []
    }
  }
  return messages
}

const messagesOf = (r: RecordedRequest | undefined) => ((r?.body as { messages?: ReadonlyArray<{ role: string; tool_call_id?: string; content?: unknown }> } | undefined)?.messages ?? [])

describe("Codex over the Responses WebSocket", () => {
  it("runs a text turn and a tool-call turn over the socket, with no fallback to HTTP", async () => {
    upstream.onRequest((_req, index) =>
      index === 0 ? chatSse({ toolCalls: [{ id: "call_ws_1", name: "exec_command", arguments: JSON.stringify({ cmd: "echo over-the-socket" }) }] }) : chatSse({ content: "Socket done." })
    )
    const proxy = await recordingProxy(on)
    const run = await runCodex({ baseUrl: proxy.url, apiKey: KEY, prompt: "Echo a marker", provider: WEBSOCKETS })
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
      // what Codex sent: the turn after the tool call chains the first by previous_response_id and
      // sends only its new items (the call's output), not the history again
      const creates = clientTextMessages(proxy.sent())
        .map((text) => JSON.parse(text) as { type?: string; generate?: boolean; previous_response_id?: string; input?: ReadonlyArray<{ type?: string; role?: string }> })
        .filter((m) => m.type === "response.create" && m.generate !== false)
      expect(creates.length, JSON.stringify(creates).slice(0, 2000)).toBe(2)
      expect(JSON.stringify(creates[0].input)).toContain("Echo a marker")
      expect(creates[1].previous_response_id).toMatch(/^resp_/)
      expect(JSON.stringify(creates[1].input)).not.toContain("Echo a marker")
      expect(creates[1].input?.map((item) => item.type)).toEqual(["function_call_output"])
    } finally {
      await run.dispose()
      await proxy.close()
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
