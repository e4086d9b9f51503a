/**
 * Agents (`agent/<name>`: the prompt replaces the caller's system prompt), skills (`skill/<name>`:
 * content appended) and the app's system policy, on every protocol and in count_tokens.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-agents-test-key-1"

interface UpstreamBody {
  readonly model: string
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>
}

describe("agents, skills and the app system policy", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  const systemOf = () => {
    const body = upstream.requests[upstream.requests.length - 1].body as UpstreamBody
    return { model: body.model, system: body.messages.filter((m) => m.role === "system").map((m) => m.content) }
  }
  const post = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": KEY, authorization: `Bearer ${KEY}` }, body: JSON.stringify(body) })

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "team" }],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" } },
      aliases: { fast: "up/fast-model" },
      agents: { reviewer: { model: "fast", prompt: "You review code." } },
      skills: { sql: { model: "up/sql-model", content: "Write ANSI SQL." } },
      apps: { team: { system: "Policy: be kind." } }
    })
  })
  beforeEach(() => {
    upstream.reset()
    upstream.onRequest(() => chatJson({ content: "ok" }))
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("an agent's prompt replaces the caller's system prompt, after the app policy", async () => {
    const res = await post("/v1/messages", { model: "agent/reviewer", max_tokens: 10, system: "caller system", messages: [{ role: "user", content: "x" }] })
    expect(res.status).toBe(200)
    expect(((await res.json()) as { model: string }).model).toBe("agent/reviewer")
    expect(systemOf()).toEqual({ model: "fast-model", system: ["Policy: be kind.\n\nYou review code."] })
  })

  it("a skill's content is appended to the caller's system prompt (chat completions too)", async () => {
    const res = await post("/v1/chat/completions", { model: "skill/sql", messages: [{ role: "system", content: "caller system" }, { role: "user", content: "x" }] })
    expect(res.status).toBe(200)
    expect(systemOf()).toEqual({ model: "sql-model", system: ["Policy: be kind.\n\ncaller system\n\nWrite ANSI SQL."] })
  })

  it("the app policy comes first on plain models", async () => {
    await post("/v1/responses", { model: "fast", instructions: "be brief", input: "x" })
    expect(systemOf().system).toEqual(["Policy: be kind.\n\nbe brief"])
  })

  it("an unknown agent or skill is 404 model_not_found, in count_tokens too", async () => {
    for (const model of ["agent/nobody", "skill/nothing"]) {
      const res = await post("/v1/messages/count_tokens", { model, messages: [{ role: "user", content: "x" }] })
      expect(res.status, model).toBe(404)
    }
    expect(upstream.requests).toHaveLength(0)
  })

  it("count_tokens counts the agent prompt in place of the caller's system prompt", async () => {
    const long = "word ".repeat(400)
    const plain = (await (await post("/v1/messages/count_tokens", { model: "fast", system: long, messages: [{ role: "user", content: "x" }] })).json()) as { input_tokens: number }
    const agent = (await (await post("/v1/messages/count_tokens", { model: "agent/reviewer", system: long, messages: [{ role: "user", content: "x" }] })).json()) as {
      input_tokens: number
    }
    expect(agent.input_tokens).toBeLessThan(plain.input_tokens - 300)
  })

  it("lists agents and skills as models", async () => {
    const res = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } })
    const ids = ((await res.json()) as { data: ReadonlyArray<{ id: string }> }).data.map((m) => m.id)
    expect(ids).toEqual(expect.arrayContaining(["agent/reviewer", "skill/sql", "fast"]))
  })
})
