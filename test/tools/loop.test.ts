/**
 * The host tool loop's rules, on every protocol: a caller call in a turn with host calls is set
 * aside and the model called again; `maxHostToolRounds` ends the answer as cut short; several host
 * calls of a turn run together (a rendezvous tool that answers `met` only when its calls overlap);
 * a stream keeps the connection alive while a slow host tool runs (Messages with its one `ping`);
 * structured output still works with host tools offered.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import * as Gemini from "../support/FakeGeminiUpstream.js"
import * as OpenAiFake from "../support/FakeUpstream.js"
import * as Messages from "../support/FakeMessagesUpstream.js"
import { startSlowMcpServer, type SlowMcpServer } from "../support/SlowMcpServer.js"
import { CLIENTS, everythingScript, isRecord, KEY, PROTOCOLS, rec, recs, sseFrames, startWorld, UPSTREAMS, type CallSpec, type Protocol, type UpstreamKind, type World } from "./matrix.js"

const CAPPED = "sk-host-tools-capped-0123"
const SUM: CallSpec = { id: "call_sum_1", name: "everything__get-sum", args: { a: 2, b: 3 } }
const ECHO: CallSpec = { id: "call_echo_1", name: "everything__echo", args: { message: "again" } }
const WEATHER: CallSpec = { id: "call_weather_1", name: "get_weather", args: { city: "Paris" } }
const WEATHER_TOOL = { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }
const LONG: CallSpec = { id: "call_long_1", name: "everything__trigger-long-running-operation", args: { duration: 6, steps: 1 } }

let slow: SlowMcpServer
let world: World
beforeAll(async () => {
  slow = await startSlowMcpServer()
  world = await startWorld({
    keys: [
      { key: KEY, app: "team" },
      { key: CAPPED, app: "capped" }
    ],
    toolServers: { everything: { command: [process.execPath, everythingScript, "stdio"] }, slow: { url: slow.url } },
    apps: {
      team: { hostTools: ["everything/echo", "everything/get-sum", "everything/trigger-long-running-operation", "slow/rendezvous"] },
      capped: { hostTools: ["everything/echo"], maxHostToolRounds: 2 }
    }
  })
}, 60_000)
afterAll(async () => {
  await world?.close()
  await slow?.close()
})

/** Each protocol against an upstream kind in turn, so that every kind is met on both forms. */
const pairs = (): Array<{ protocol: Protocol; stream: boolean; kind: UpstreamKind }> =>
  PROTOCOLS.flatMap((protocol, p) => [false, true].map((stream, s) => ({ protocol, stream, kind: UPSTREAMS[(p * 2 + s) % UPSTREAMS.length] })))

const resetAll = () => {
  for (const kind of UPSTREAMS) world.upstreams[kind].reset()
}

describe("a caller call in a turn with host calls", () => {
  beforeEach(resetAll)
  for (const { protocol, stream, kind } of pairs()) {
    it(`is set aside, the model called again (${protocol} ${stream ? "stream" : "JSON"} via ${kind})`, async () => {
      const client = CLIENTS[protocol]
      const upstream = world.upstreams[kind]
      upstream.script({ calls: [SUM, WEATHER] }, { text: "Checking the weather.", calls: [{ ...WEATHER, id: "call_weather_2" }] })

      const reply = await client.send(world.gateway.url, { model: upstream.model, stream, tools: [WEATHER_TOOL] })
      expect(reply.status, reply.body).toBe(200)
      expect(client.read(reply, stream)).toMatchObject({ text: "Checking the weather.", finish: client.finishes.toolCalls, calls: [{ name: "get_weather", args: { city: "Paris" } }], usage: { input: 20, output: 6 } })
      if (!stream) expect(reply.headers.get("x-gateway-host-tool-calls")).toBe("1")

      const [first, second, ...more] = upstream.bodies()
      expect(more).toEqual([])
      expect(upstream.toolNames(first)).toContain("get_weather")
      // the second request carries the host exchange only: the caller's call was not made
      expect(upstream.exchanges(second)).toEqual([{ name: SUM.name, args: SUM.args, result: expect.stringContaining("The sum of 2 and 3 is 5.") }])
    })
  }
})

describe("maxHostToolRounds", () => {
  beforeEach(resetAll)
  for (const { protocol, stream, kind } of pairs()) {
    it(`ends the answer as cut short after 2 model calls (${protocol} ${stream ? "stream" : "JSON"} via ${kind})`, async () => {
      const client = CLIENTS[protocol]
      const upstream = world.upstreams[kind]
      upstream.answer(() => ({ text: "Once more.", calls: [ECHO] }))

      const reply = await client.send(world.gateway.url, { model: upstream.model, stream, key: CAPPED })
      expect(reply.status, reply.body).toBe(200)
      expect(client.read(reply, stream)).toMatchObject({ text: "Once more.\n\nOnce more.", finish: client.finishes.length, calls: [], usage: { input: 20, output: 6 } })
      expect(reply.body).not.toContain("everything__")
      // the first round's call ran; the second round's was not run
      if (!stream) expect(reply.headers.get("x-gateway-host-tool-calls")).toBe("1")
      const bodies = upstream.bodies()
      expect(bodies).toHaveLength(2)
      expect(upstream.exchanges(bodies[1])).toEqual([{ name: ECHO.name, args: ECHO.args, result: expect.stringContaining("Echo: again") }])
    })
  }
})

describe("several host calls in one turn", () => {
  beforeEach(resetAll)
  for (const kind of UPSTREAMS) {
    it(`run together, their results in the calls' order (via ${kind})`, async () => {
      const upstream = world.upstreams[kind]
      const call = (party: string): CallSpec => ({ id: `call_${party}`, name: "slow__rendezvous", args: { party } })
      upstream.script({ calls: [call("b"), call("a")] }, { text: "Both met." })

      const reply = await CLIENTS.chat.send(world.gateway.url, { model: upstream.model, stream: false })
      expect(reply.status, reply.body).toBe(200)
      expect(CLIENTS.chat.read(reply, false).text).toBe("Both met.")
      expect(reply.headers.get("x-gateway-host-tool-calls")).toBe("2")
      // run one after the other, the first would have waited alone and answered `alone b`
      const [, second] = upstream.bodies()
      expect(upstream.exchanges(second)).toEqual([
        { name: "slow__rendezvous", args: { party: "b" }, result: expect.stringContaining("met b") },
        { name: "slow__rendezvous", args: { party: "a" }, result: expect.stringContaining("met a") }
      ])
    }, 60_000)
  }
})

describe("structured output with host tools offered", () => {
  beforeEach(resetAll)
  const schema = { type: "object", properties: { sum: { type: "number" } }, required: ["sum"], additionalProperties: false }
  for (const kind of UPSTREAMS) {
    for (const stream of [false, true]) {
      it(`a chat json_schema answer after a host call (${stream ? "stream" : "JSON"} via ${kind})`, async () => {
        const upstream = world.upstreams[kind]
        upstream.script({ calls: [SUM] }, { text: '{"sum":5}' })
        const reply = await CLIENTS.chat.send(world.gateway.url, {
          model: upstream.model,
          stream,
          extra: { response_format: { type: "json_schema", json_schema: { name: "sum", strict: true, schema } } }
        })
        expect(reply.status, reply.body).toBe(200)
        const seen = CLIENTS.chat.read(reply, stream)
        expect(JSON.parse(seen.text)).toEqual({ sum: 5 })
        expect(seen.finish).toBe("stop")
        const [first, second] = upstream.bodies()
        expect(upstream.toolNames(first)).toEqual(expect.arrayContaining(["everything__get-sum"]))
        expect(upstream.exchanges(second)).toEqual([{ name: SUM.name, args: SUM.args, result: expect.stringContaining("The sum of 2 and 3 is 5.") }])
      })
    }
  }
})

/**
 * Where the first keep-alive is in a stream body, or -1: an SSE comment, or on Gemini's SSE form a
 * blank line of its own (at the start, or after a frame's end).
 */
const keepAliveAt = (protocol: Protocol, body: string): number => {
  if (protocol !== "gemini") return body.indexOf(": keep-alive\n\n")
  const match = /(?:^|\r\n\r\n)\r\n/.exec(body)
  return match === null ? -1 : match.index + match[0].length - 2
}

describe.concurrent("a stream while a slow host tool runs", () => {
  beforeAll(() => {
    resetAll()
    // stateless: the streams run side by side; a prompt saying "quietly" gets no text before the call
    const upstream = world.upstreams.openai
    upstream.answer((body) =>
      upstream.endsWithResults(body) ? { text: "Done." } : JSON.stringify(body).includes("quietly") ? { calls: [LONG] } : { text: "Working on it.", calls: [LONG] }
    )
  })

  for (const protocol of PROTOCOLS) {
    for (const quiet of [false, true]) {
      it(`keeps the connection alive, the rounds' text in order (${protocol}${quiet ? ", no text before the call" : ""})`, async () => {
        const client = CLIENTS[protocol]
        const prompt = `Work${quiet ? " quietly" : ""}, ${protocol}.`
        const reply = await client.send(world.gateway.url, { model: "oa/gpt-fake", stream: true, prompt })
        expect(reply.status, reply.body).toBe(200)
        expect(client.read(reply, true)).toMatchObject({ text: quiet ? "Done." : "Working on it.\n\nDone.", finish: client.finishes.stop, calls: [] })

        // the keep-alive came while the tool ran: after the first round's text, before the second's
        const body = reply.body
        const keepAlive = keepAliveAt(protocol, body)
        expect(keepAlive, body).toBeGreaterThanOrEqual(0)
        if (!quiet) expect(keepAlive).toBeGreaterThan(body.indexOf("Working"))
        expect(keepAlive).toBeLessThan(body.indexOf("Done."))
        if (protocol === "messages") expect(sseFrames(body).filter((f) => f.event === "ping")).toHaveLength(1)

        // this stream's second model call had the long-running tool's result
        const upstream = world.upstreams.openai
        const mine = upstream.bodies().filter((b) => recs(rec(b).messages).some((m) => m.role === "user" && JSON.stringify(m.content).includes(prompt)))
        expect(mine).toHaveLength(2)
        expect(upstream.exchanges(mine[1])).toEqual([{ name: LONG.name, args: LONG.args, result: expect.stringContaining("Long running operation completed") }])
      }, 60_000)
    }
  }
})

describe("reasoning signatures go back where they came", () => {
  beforeEach(resetAll)
  const sumUse = { type: "tool_use" as const, id: SUM.id, name: SUM.name, input: SUM.args }
  for (const stream of [false, true]) {
    it(`Messages: each thinking block with its own signature, in order (${stream ? "stream" : "JSON"})`, async () => {
      const blocks = [
        { type: "thinking" as const, thinking: "First, the plan.", signature: "sig-a" },
        { type: "text" as const, text: "Let me add." },
        { type: "thinking" as const, thinking: "Then the tool.", signature: "sig-b" },
        sumUse
      ]
      world.fakes.anthropic.script(Messages.auto({ blocks }), Messages.auto({ blocks: [{ type: "text", text: "It is 5." }] }))
      const reply = await CLIENTS.chat.send(world.gateway.url, { model: world.upstreams.anthropic.model, stream })
      expect(reply.status, reply.body).toBe(200)
      expect(CLIENTS.chat.read(reply, stream).text).toBe("Let me add.\n\nIt is 5.")
      const [, second] = world.upstreams.anthropic.bodies()
      expect(recs(rec(second).messages)[1]).toEqual({ role: "assistant", content: blocks })
    })

    it(`Gemini: the signature on the function call it came with (${stream ? "stream" : "JSON"})`, async () => {
      world.fakes.gemini.script(
        Gemini.auto({ thoughts: "I should add.", text: "Let me add.", calls: [{ name: SUM.name, args: SUM.args }], signature: "sig-g" }),
        Gemini.auto({ text: "It is 5." })
      )
      const reply = await CLIENTS.chat.send(world.gateway.url, { model: world.upstreams.gemini.model, stream })
      expect(reply.status, reply.body).toBe(200)
      expect(CLIENTS.chat.read(reply, stream).text).toBe("Let me add.\n\nIt is 5.")
      const [, second] = world.upstreams.gemini.bodies()
      const model = recs(rec(second).contents)[1]
      expect(model.role).toBe("model")
      expect(recs(model.parts)).toEqual([{ text: "Let me add." }, { functionCall: expect.objectContaining({ name: SUM.name, args: SUM.args }), thoughtSignature: "sig-g" }])
    })
  }
})

describe("a model call failing mid-loop", () => {
  beforeEach(resetAll)
  const failed: Record<Protocol, (frames: ReturnType<typeof sseFrames>) => boolean> = {
    chat: (frames) => frames.some((f) => isRecord(f.data) && isRecord(f.data.error)) && !frames.some((f) => f.data === "[DONE]"),
    responses: (frames) => frames.some((f) => f.event === "response.failed") && !frames.some((f) => f.event === "response.completed"),
    messages: (frames) => frames.some((f) => f.event === "error") && !frames.some((f) => f.event === "message_stop"),
    gemini: (frames) => frames.some((f) => isRecord(f.data) && isRecord(f.data.error))
  }
  for (const protocol of PROTOCOLS) {
    for (const stream of [false, true]) {
      it(`ends the answer with the protocol's error (${protocol} ${stream ? "stream, after output" : "JSON"})`, async () => {
        const client = CLIENTS[protocol]
        world.upstreams.openai.script({ text: "Let me add.", calls: [SUM] })
        world.fakes.openai.script(OpenAiFake.openAiError(400, "Invalid value for temperature.", "invalid_request_error"))
        const reply = await client.send(world.gateway.url, { model: world.upstreams.openai.model, stream })
        expect(world.upstreams.openai.bodies()).toHaveLength(2)
        if (!stream) {
          expect(client.refusal(reply, null)).toContain("refused the request")
          return
        }
        expect(reply.status).toBe(200)
        expect(client.read(reply, true).text).toBe("Let me add.")
        expect(failed[protocol](sseFrames(reply.body)), reply.body).toBe(true)
      })
    }
  }
})
