/**
 * The Responses API over WebSocket (`GET /v1/responses` with `Upgrade: websocket`): the edge's
 * refusals before the upgrade, response.create turns as SSE events one message each, continuation
 * on the connection with store:false, generate:false, unknown messages, and 426 when switched off.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import WebSocket from "ws"
import { chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { KEYS, RESP_ID, asRecord, gatewayDocument, messagesOf, records, type Json } from "./helpers.js"

let upstream: FakeUpstream
let gateway: TestGateway
let off: TestGateway

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gateway = await startGateway(gatewayDocument(upstream.url))
  off = await startGateway(gatewayDocument(upstream.url, { responsesWebSocket: false }))
})

afterAll(async () => {
  await gateway?.close()
  await off?.close()
  await upstream?.close()
})

beforeEach(() => upstream.reset())

/** A connected socket with every message it received, and a way to wait for the next ones. */
interface Client {
  readonly ws: WebSocket
  readonly received: Array<Json>
  /** the messages after `from` up to (and with) the first whose type is one of `types` */
  readonly until: (types: ReadonlyArray<string>) => Promise<Array<Json>>
  readonly send: (message: Json) => void
  readonly closed: Promise<number>
}

const TERMINAL = ["response.completed", "response.incomplete", "response.failed", "error"]

const connect = (target: TestGateway, headers: Record<string, string> = { authorization: `Bearer ${KEYS.alpha}` }): Promise<Client> =>
  new Promise((resolve, reject) => {
    const ws = new WebSocket(`${target.url.replace("http", "ws")}/v1/responses`, { headers })
    const received: Array<Json> = []
    let read = 0
    const waiters: Array<() => void> = []
    const closed = new Promise<number>((done) => ws.on("close", (code) => done(code)))
    ws.on("message", (data) => {
      received.push(asRecord(JSON.parse(String(data))))
      for (const w of waiters.splice(0)) w()
    })
    ws.on("close", () => {
      for (const w of waiters.splice(0)) w()
    })
    ws.on("error", reject)
    ws.on("unexpected-response", (_req, res) => {
      let body = ""
      res.on("data", (c: Buffer) => (body += c.toString()))
      res.on("end", () => reject(Object.assign(new Error(`status ${res.statusCode}`), { status: res.statusCode, body })))
    })
    ws.on("open", () =>
      resolve({
        ws,
        received,
        closed,
        send: (message) => ws.send(JSON.stringify(message)),
        until: (types) =>
          new Promise((done, fail) => {
            const check = () => {
              for (let i = read; i < received.length; i++) {
                if (types.includes(String(received[i].type))) {
                  const out = received.slice(read, i + 1)
                  read = i + 1
                  return done(out)
                }
              }
              if (ws.readyState === WebSocket.CLOSED) return fail(new Error(`socket closed; got ${JSON.stringify(received.slice(read))}`))
              waiters.push(check)
            }
            check()
          })
      })
    )
  })

const refusalOf = async (target: TestGateway, headers: Record<string, string>): Promise<{ status: number; body: Json }> => {
  try {
    const client = await connect(target, headers)
    client.ws.close()
    throw new Error("the upgrade was accepted")
  } catch (e) {
    const { status, body } = e as { status?: number; body?: string }
    if (status === undefined) throw e
    return { status, body: asRecord(JSON.parse(body ?? "")) }
  }
}

const responseOf = (events: Array<Json>): Json => asRecord(events[events.length - 1].response)

describe("Responses over WebSocket", () => {
  it("answers a text turn as the SSE events, one message each, with sequence numbers", async () => {
    upstream.script(chatSse({ content: "Hello over the socket", split: 3 }))
    const client = await connect(gateway)
    client.send({ type: "response.create", model: "up/fake-model", input: "hi", store: false })
    const events = await client.until(TERMINAL)
    client.ws.close()
    expect(events[0].type).toBe("response.created")
    expect(events[events.length - 1].type).toBe("response.completed")
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => String(e.delta)).join("")
    expect(text).toBe("Hello over the socket")
    expect(String(responseOf(events).id)).toMatch(RESP_ID)
    // stream implied: the upstream was asked for a stream
    expect(asRecord(upstream.requests[0].body).stream).toBe(true)
  })

  it("continues with store:false from the connection's last response, sending only the new items", async () => {
    upstream.script(chatSse({ toolCalls: [{ id: "call_1", name: "shell", arguments: '{"cmd":"ls"}' }] }))
    upstream.script(chatSse({ content: "Two files." }))
    const client = await connect(gateway)
    const tools = [{ type: "function", name: "shell", parameters: { type: "object", properties: { cmd: { type: "string" } } } }]
    client.send({ type: "response.create", model: "up/fake-model", input: [{ role: "user", content: "list files" }], tools, store: false })
    const first = responseOf(await client.until(TERMINAL))
    const call = records(first.output).find((i) => i.type === "function_call")
    expect(call?.name).toBe("shell")
    client.send({
      type: "response.create",
      model: "up/fake-model",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call?.call_id, output: "a.txt b.txt" }],
      tools,
      store: false
    })
    const second = await client.until(TERMINAL)
    client.ws.close()
    expect(second[second.length - 1].type).toBe("response.completed")
    const messages = messagesOf(upstream.requests[1])
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"])
    expect(messages[2].content).toBe("a.txt b.txt")
  })

  it("answers an unknown previous_response_id with previous_response_not_found and keeps the socket open", async () => {
    const client = await connect(gateway)
    client.send({ type: "response.create", model: "up/fake-model", previous_response_id: "resp_00000000000000000000000000000000", input: "hi" })
    const [error] = await client.until(TERMINAL)
    expect(error).toMatchObject({ type: "error", status: 400, error: { code: "previous_response_not_found", param: "previous_response_id" } })
    expect(upstream.requests).toHaveLength(0)
    upstream.script(chatSse({ content: "still here" }))
    client.send({ type: "response.create", model: "up/fake-model", input: "hi", store: false })
    const events = await client.until(TERMINAL)
    client.ws.close()
    expect(events[events.length - 1].type).toBe("response.completed")
  })

  it("generate:false calls no model and answers a response that can be chained", async () => {
    upstream.script(chatSse({ content: "ok" }))
    const client = await connect(gateway)
    client.send({ type: "response.create", model: "up/fake-model", input: [{ role: "user", content: "warm up" }], store: false, generate: false })
    const warm = await client.until(TERMINAL)
    expect(warm.map((e) => e.type)).toEqual(["response.created", "response.in_progress", "response.completed"])
    expect(upstream.requests).toHaveLength(0)
    client.send({ type: "response.create", model: "up/fake-model", previous_response_id: responseOf(warm).id, input: "go", store: false })
    await client.until(TERMINAL)
    client.ws.close()
    expect(messagesOf(upstream.requests[0]).map((m) => m.content)).toEqual(["warm up", "go"])
  })

  it("answers an unknown message type with an error event, accepts response.processed, refuses background", async () => {
    const client = await connect(gateway)
    client.send({ type: "response.processed" })
    client.send({ type: "session.update" })
    const [unknown] = await client.until(TERMINAL)
    expect(unknown).toMatchObject({ type: "error", status: 400, error: { code: "unknown_message_type", type: "invalid_request_error" } })
    client.send({ type: "response.create", model: "up/fake-model", input: "hi", background: true })
    const [background] = await client.until(TERMINAL)
    expect(background).toMatchObject({ type: "error", status: 400, error: { param: "background" } })
    expect(client.ws.readyState).toBe(WebSocket.OPEN)
    client.ws.close()
  })

  it("refuses before the upgrade as HTTP would: no key 401, a plain GET 426 upgrade_required, switched off 426", async () => {
    const noKey = await refusalOf(gateway, {})
    expect(noKey.status).toBe(401)
    expect(asRecord(noKey.body.error).type).toBe("authentication_error")
    const disabled = await refusalOf(off, { authorization: `Bearer ${KEYS.alpha}` })
    expect(disabled.status).toBe(426)
    expect(asRecord(disabled.body.error).code).toBe("websocket_disabled")
    const plain = await fetch(`${gateway.url}/v1/responses`, { headers: { authorization: `Bearer ${KEYS.alpha}` } })
    expect(plain.status).toBe(426)
    expect(asRecord(((await plain.json()) as { error: unknown }).error).code).toBe("upgrade_required")
  })
})
