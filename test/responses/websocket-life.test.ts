/**
 * The life of a Responses WebSocket: the waiting-message bound, closing the socket aborts the
 * upstream call, the idle timeout and connection lifetime (short configured timers), and shutdown
 * closing open sockets with 1001.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import WebSocket from "ws"
import * as net from "node:net"
import { chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
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

/** Whether a TCP connection to the port is refused (a stopping server no longer accepts). */
const refusing = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(false)
    })
    socket.once("error", () => resolve(true))
  })

interface Opened {
  readonly ws: WebSocket
  readonly received: Array<Json>
  readonly closed: Promise<number>
}

const open = (target: TestGateway, key: string = KEYS.alpha): Promise<Opened> =>
  new Promise((resolve, reject) => {
    const ws = new WebSocket(`${target.url.replace("http", "ws")}/v1/responses`, { headers: { authorization: `Bearer ${key}` } })
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


  it("shutdown: an idle socket closes with 1001 at once, a busy one at the end of the grace period (its upstream call aborted); the gateway stops", async () => {
    const stopping = await startGateway(gatewayDocument(upstream.url))
    upstream.onRequest(() => ({ kind: "stall", ms: 30_000 }))
    const idle = await open(stopping)
    const busy = await open(stopping)
    busy.ws.send(JSON.stringify(create))
    await until("the upstream call", () => upstream.requests.length === 1 && upstream.openConnections() > 0)
    const order: Array<string> = []
    void idle.closed.then(() => order.push("idle"))
    void busy.closed.then(() => order.push("busy"))
    // close resolves only when every connection is gone: a socket left open would hold it (and the test's timeout would fail it)
    await stopping.close()
    expect(await idle.closed).toBe(1001)
    expect(await busy.closed).toBe(1001)
    expect(order).toEqual(["idle", "busy"])
    expect(busy.received.some((m) => m.type === "response.completed")).toBe(false)
    await until("the upstream connection to close", () => upstream.openConnections() === 0)
  })

  it("shutdown: a response running when the stop begins completes, then its socket closes with 1001; a new message meanwhile is refused", async () => {
    const stopping = await startGateway(gatewayDocument(upstream.url), { shutdownGraceMs: 60_000 })
    let release = (): void => undefined
    const held = new Promise<void>((resolve) => (release = resolve))
    upstream.onRequest(async () => {
      await held
      return chatSse({ content: "finished after the stop began" })
    })
    const client = await open(stopping)
    client.ws.send(JSON.stringify(create))
    await until("the upstream call", () => upstream.requests.length === 1)
    const closing = stopping.close()
    // the stop has begun once the server refuses new connections
    for (let i = 0; i < 500 && !(await refusing(stopping.port)); i++) await new Promise((r) => setTimeout(r, 20))
    client.ws.send(JSON.stringify(create))
    await until("the refusal", () => client.received.some((m) => m.type === "error"))
    release()
    expect(await client.closed).toBe(1001)
    await closing
    const types = client.received.map((m) => m.type)
    expect(types).toContain("response.completed")
    const refusal = client.received.find((m) => m.type === "error")
    expect(refusal?.status).toBe(503)
    expect(asRecord(refusal?.error).code).toBe("server_shutting_down")
    // one upstream call: the refused message started none
    expect(upstream.requests).toHaveLength(1)
  })

  it("each message within the app's limits: one over maxBodyBytes and one past requestsPerMinute are error events (413, 429 with Retry-After); the socket stays open", async () => {
    const LIMITED = "sk-ws-limited-app-key"
    const limited = await startGateway(
      gatewayDocument(upstream.url, {
        keys: [{ key: LIMITED, app: "limited" }],
        apps: { limited: { limits: { requestsPerMinute: 1 } } },
        limits: { apps: { limited: { maxBodyBytes: 2048 } } }
      })
    )
    try {
      upstream.onRequest(() => chatSse({ content: "within the limits" }))
      const client = await open(limited, LIMITED)
      client.ws.send(JSON.stringify({ ...create, input: "x".repeat(4096) }))
      await until("the size refusal", () => client.received.length >= 1)
      expect(client.received[0]).toMatchObject({ type: "error", status: 413 })
      expect(asRecord(client.received[0].error).code).toBe("payload_too_large")
      client.ws.send(JSON.stringify(create))
      await until("the first response", () => client.received.some((m) => m.type === "response.completed"))
      client.ws.send(JSON.stringify(create))
      await until("the rate refusal", () => client.received.filter((m) => m.type === "error").length >= 2)
      const refusal = client.received.filter((m) => m.type === "error")[1]
      expect(refusal.status).toBe(429)
      expect(Number(asRecord(refusal.headers)["retry-after"])).toBeGreaterThan(0)
      // one model call: the refused messages reached no upstream
      expect(upstream.requests).toHaveLength(1)
      expect(client.ws.readyState).toBe(WebSocket.OPEN)
      client.ws.close()
      await client.closed
    } finally {
      await limited.close()
    }
  })
})

