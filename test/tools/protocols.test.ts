/**
 * Host tools on every protocol against every upstream kind, with the real server-everything over
 * stdio: a model that calls a host tool gets the server's result and answers; the client sees one
 * answer in its protocol (text of both rounds, no host call), and the upstream's second request
 * holds the call and its result paired its own way. Then the refusals and what is offered: a name
 * clash, tool_choice none, and agents granting a subset, none, or not the tool a choice names.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { CLIENTS, KEY, PROTOCOLS, startWorld, UPSTREAMS, type World } from "./matrix.js"

const SUM = { id: "call_sum_1", name: "everything__get-sum", args: { a: 2, b: 3 } }
const HOST_TOOLS = ["everything__echo", "everything__get-sum"]
const SESSION = /^ses_[0-9a-f]{32}$/

let world: World
beforeAll(async () => {
  world = await startWorld({
    agents: {
      reviewer: { model: "oa/gpt-fake", prompt: "You review code.", hostTools: ["everything/echo"] },
      silent: { model: "oa/gpt-fake", prompt: "You answer from memory." }
    }
  })
}, 60_000)
afterAll(async () => {
  await world?.close()
})
beforeEach(() => {
  for (const kind of UPSTREAMS) world.upstreams[kind].reset()
})

describe("a host call and the answer, per protocol and upstream", () => {
  for (const protocol of PROTOCOLS) {
    for (const stream of [false, true]) {
      for (const kind of UPSTREAMS) {
        it(`${protocol} ${stream ? "stream" : "JSON"} via ${kind}`, async () => {
          const client = CLIENTS[protocol]
          const upstream = world.upstreams[kind]
          upstream.script({ text: "Let me add.", calls: [SUM] }, { text: "It is 5." })

          const reply = await client.send(world.gateway.url, { model: upstream.model, stream })
          expect(reply.status, reply.body).toBe(200)
          // the usage is summed over both model calls (10 in, 3 out each)
          expect(client.read(reply, stream)).toEqual({ text: "Let me add.\n\nIt is 5.", finish: client.finishes.stop, calls: [], usage: { input: 20, output: 6 } })
          // nothing of the host exchange reaches the client
          expect(reply.body).not.toContain("everything__")
          expect(reply.body).not.toContain("The sum of")
          if (!stream) {
            expect(reply.headers.get("x-gateway-host-tool-calls")).toBe("1")
            const sessions = (reply.headers.get("x-gateway-session") ?? "").split(",")
            expect(sessions).toHaveLength(2)
            for (const session of sessions) expect(session).toMatch(SESSION)
            expect(new Set(sessions).size).toBe(2)
          }

          const [first, second, ...more] = upstream.bodies()
          expect(more).toEqual([])
          expect(upstream.toolNames(first)).toEqual(HOST_TOOLS)
          expect(upstream.exchanges(first)).toEqual([])
          expect(upstream.toolNames(second)).toEqual(HOST_TOOLS)
          expect(upstream.exchanges(second)).toEqual([{ name: SUM.name, args: SUM.args, result: expect.stringContaining("The sum of 2 and 3 is 5.") }])
        })
      }
    }
  }
})

describe("refusals and what is offered, per protocol", () => {
  for (const protocol of PROTOCOLS) {
    const client = CLIENTS[protocol]

    it(`${protocol}: a caller tool named as a host tool is a name clash (400 naming it)`, async () => {
      const reply = await client.send(world.gateway.url, { model: "oa/gpt-fake", stream: false, tools: [{ name: "everything__echo" }] })
      expect(client.refusal(reply, "tools")).toContain("everything__echo")
      expect(world.upstreams.openai.bodies()).toEqual([])
    })

    it(`${protocol}: tool_choice none offers no host tools`, async () => {
      const upstream = world.upstreams.openai
      upstream.script({ text: "No tools today." })
      const reply = await client.send(world.gateway.url, { model: upstream.model, stream: false, tools: [{ name: "lookup" }], toolChoice: "none" })
      expect(reply.status, reply.body).toBe(200)
      expect(client.read(reply, false).text).toBe("No tools today.")
      const [body] = upstream.bodies()
      expect(upstream.toolNames(body).filter((name) => name.startsWith("everything__"))).toEqual([])
    })

    it(`${protocol}: an agent is offered only the host tools it grants`, async () => {
      const upstream = world.upstreams.openai
      upstream.script({ text: "Reviewed." }, { text: "Remembered." })
      const reviewer = await client.send(world.gateway.url, { model: "agent/reviewer", stream: false, tools: [{ name: "lookup" }] })
      expect(reviewer.status, reviewer.body).toBe(200)
      const silent = await client.send(world.gateway.url, { model: "agent/silent", stream: false, tools: [{ name: "lookup" }] })
      expect(silent.status, silent.body).toBe(200)
      const [granted, none] = upstream.bodies()
      expect(upstream.toolNames(granted)).toEqual(["lookup", "everything__echo"])
      expect(upstream.toolNames(none)).toEqual(["lookup"])
    })

    it(`${protocol}: tool_choice may force an offered host tool (the next round is free to answer)`, async () => {
      for (const kind of UPSTREAMS) {
        const upstream = world.upstreams[kind]
        upstream.reset()
        upstream.script({ calls: [SUM] }, { text: "It is 5." })
        const reply = await client.send(world.gateway.url, { model: upstream.model, stream: false, toolChoice: { name: SUM.name } })
        expect(reply.status, reply.body).toBe(200)
        expect(client.read(reply, false).text).toBe("It is 5.")
        const [first, second] = upstream.bodies()
        expect(upstream.forced(first), kind).toBe(SUM.name)
        expect(upstream.forced(second), kind).toBeUndefined()
        expect(upstream.exchanges(second)).toEqual([{ name: SUM.name, args: SUM.args, result: expect.stringContaining("The sum of 2 and 3 is 5.") }])
      }
    })

    it(`${protocol}: tool_choice naming a host tool the agent does not grant is refused (400)`, async () => {
      for (const model of ["agent/reviewer", "agent/silent"]) {
        const reply = await client.send(world.gateway.url, { model, stream: false, toolChoice: { name: "everything__get-sum" } })
        expect(client.refusal(reply, "tool_choice")).toContain("everything__get-sum")
      }
      expect(world.upstreams.openai.bodies()).toEqual([])
    })
  }
})

describe("count_tokens with a tool_choice naming a host tool", () => {
  const count = (protocol: "messages" | "gemini", model: string, name: string) =>
    protocol === "messages"
      ? fetch(`${world.gateway.url}/v1/messages/count_tokens`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01" },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "What is 2 + 3?" }], tool_choice: { type: "tool", name } })
        })
      : fetch(`${world.gateway.url}/v1beta/models/${model}:countTokens`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-goog-api-key": KEY },
          body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "What is 2 + 3?" }] }], toolConfig: { functionCallingConfig: { mode: "ANY", allowedFunctionNames: [name] } } })
        })
  for (const protocol of ["messages", "gemini"] as const) {
    it(`${protocol}: counts when the tool is offered, refuses (400 naming it) when the agent does not grant it`, async () => {
      const offered = await count(protocol, "oa/gpt-fake", SUM.name)
      expect(offered.status, await offered.clone().text()).toBe(200)
      const refused = await count(protocol, "agent/reviewer", SUM.name)
      const reply = { status: refused.status, headers: refused.headers, body: await refused.text() }
      expect(CLIENTS[protocol].refusal(reply, "tool_choice")).toContain(SUM.name)
    })
  }
})
