/**
 * The life of a Responses WebSocket: the waiting-message bound, closing the socket aborts the
 * upstream call, the idle timeout and connection lifetime (short configured timers), and shutdown
 * closing open sockets with 1001.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import WebSocket from "ws"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { KEYS, asRecord, gatewayDocument, type Json } from "./helpers.js"

let upstream: FakeUpstream
let gateway: TestGateway

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gateway = await startGateway(gatewayDocument(upstream.url))
})

afterAll(async () => {
  await gateway?.close()
  await upstream?.close()
})

beforeEach(() => upstream.reset())

/** Poll `check` (bounded: 10 s backstop) until it holds. */
const until = async (what: string, check: () => boolean): Promise<void> => {
  for (let i = 0; i < 500; i++) {
    if (check()) return
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`timed out waiting for ${what}`)
}

interface Opened {
  readonly ws: WebSocket
  readonly received: Array<Json>
  readonly closed: Promise<number>
}

const open = (target: TestGateway): Promise<Opened> =>
  new Promise((resolve, reject) => {
    const ws = new WebSocket(`${target.url.replace("http", "ws")}/v1/responses`, { headers: { authorization: `Bearer ${KEYS.alpha}` } })
    const received: Array<Json> = []
    const closed = new Promise<number>((done) => ws.on("close", (code) => done(code)))
    ws.on("message", (data) => received.push(asRecord(JSON.parse(String(data)))))
    ws.on("error", reject)
    ws.on("open", () => resolve({ ws, received, closed }))
  })

const create = { type: "response.create", model: "up/fake-model", input: "hi", store: false }

describe("Responses WebSocket lifecycle", () => {
  it("bounds the waiting messages: over the bound an error event, the socket stays open", async () => {
    upstream.onRequest(() => ({ kind: "stall", ms: 30_000 }))
    const client = await open(gateway)
    for (let i = 0; i < 7; i++) client.ws.send(JSON.stringify(create))
    await until("two refusals", () => client.received.length >= 2)
    expect(client.received.map((m) => asRecord(m.error).code)).toEqual(["too_many_queued_messages", "too_many_queued_messages"])
    expect(client.received[0].status).toBe(429)
    expect(client.ws.readyState).toBe(WebSocket.OPEN)
    client.ws.close()
    await client.closed
  })

  it("closing the socket aborts the upstream call", async () => {
    upstream.onRequest(() => ({ kind: "stall", ms: 30_000 }))
    const client = await open(gateway)
    client.ws.send(JSON.stringify(create))
    await until("the upstream call", () => upstream.requests.length === 1 && upstream.openConnections() > 0)
    client.ws.close()
    await client.closed
    // the stall would hold its connection 30 s: it is gone because the gateway aborted the call
    await until("the upstream connection to close", () => upstream.openConnections() === 0)
  })

  it("closes an idle connection, and one that reached its lifetime with websocket_connection_limit_reached", async () => {
    const idle = await startGateway(gatewayDocument(upstream.url, { responsesWebSocket: { idleTimeoutMs: 100 } }))
    const aged = await startGateway(gatewayDocument(upstream.url, { responsesWebSocket: { idleTimeoutMs: 60_000, maxConnectionMs: 100 } }))
    try {
      const quiet = await open(idle)
      expect(await quiet.closed).toBe(1000)
      expect(quiet.received).toEqual([])
      const old = await open(aged)
      expect(await old.closed).toBe(1000)
      expect(old.received).toEqual([expect.objectContaining({ type: "error", error: expect.objectContaining({ code: "websocket_connection_limit_reached" }) })])
    } finally {
      await idle.close()
      await aged.close()
    }
  })

})
