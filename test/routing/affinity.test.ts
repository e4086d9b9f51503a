/**
 * Routing (issue 18): conversation affinity. An alias with `strategy: weighted` (3, 1, 1, 1) and
 * `affinity: conversation` over four providers, each a fake chat-completions upstream of its own;
 * real gateways on loopback; conversations driven as Codex, Claude Code, Gemini CLI and a
 * Responses chain drive them (conversations.ts). The evidence is what reached each upstream: every
 * request an upstream receives is logged with the newest message it carried, and each turn's new
 * message holds a marker naming the conversation and turn.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN, get, parse, pollUntil } from "../gateway/helpers.js"
import { asRecord, isRecord, records, type Json } from "../responses/helpers.js"
import { chatJson, chatSse, openAiError, startFakeUpstream, type ChatSseOptions, type FakeUpstream, type RecordedRequest, type Reply } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { claudeCode, claudeUser, claudeUserJson, CLIENT_KEY, codex, geminiCli, responsesChain, uuidOf, type Conversation } from "./conversations.js"
import { mulberry32 } from "../support/Prng.js"

/** the weight of each upstream's target: p0/m has 3, the others 1 */
const WEIGHTS = [3, 1, 1, 1]
const TURNS = 10


// ---------------------------------------------------------------------------------------------
// The upstreams: four fake chat-completions servers, one per target, logging what reached them
// ---------------------------------------------------------------------------------------------

interface Arrival {
  /** the upstream (0..3), i.e. target p<n>/m */
  readonly target: number
  /** answered 429 with Retry-After: 2 */
  readonly refused: boolean
  /** the newest message the gateway sent upstream, as JSON text: it carries the turn's marker */
  readonly last: string
}

/** every request any upstream received, in order */
const arrivals: Array<Arrival> = []
/** upstreams answering 429 (Retry-After: 2) until removed */
const limited = new Set<number>()
let calls = 0

/** arguments of the tool call an upstream makes, by the tool's name */
const ARGUMENTS: Readonly<Record<string, Json>> = {
  exec_command: { cmd: "ls" },
  Bash: { command: "ls", description: "List files" },
  list_directory: { dir_path: "." },
  lookup: { query: "opening hours" }
}

const rateLimited = (): Reply => ({
  kind: "json",
  status: 429,
  headers: { "retry-after": "2" },
  body: { error: { message: "Rate limit reached for requests", type: "requests", param: null, code: "rate_limit_exceeded" } }
})

/**
 * An upstream's answer: a call of the request's first tool when the newest message is the user's
 * (so histories grow with tool calls and results), else text naming the upstream.
 */
const answer =
  (target: number) =>
  (req: RecordedRequest): Reply => {
    if (req.method !== "POST" || req.path !== "/v1/chat/completions") return openAiError(404, `no route ${req.method} ${req.path}`)
    const body = asRecord(req.body, "upstream body")
    const messages = records(body.messages, "upstream messages")
    const last = messages[messages.length - 1]
    arrivals.push({ target, refused: limited.has(target), last: JSON.stringify(last) })
    if (limited.has(target)) return rateLimited()
    const tools = Array.isArray(body.tools) ? records(body.tools, "upstream tools") : []
    const tool = tools.map((t) => (isRecord(t.function) ? t.function.name : undefined)).find((n): n is string => typeof n === "string")
    const options: ChatSseOptions =
      last?.role === "user" && tool !== undefined
        ? { toolCalls: [{ id: `call_${++calls}`, name: tool, arguments: JSON.stringify(ARGUMENTS[tool] ?? {}) }] }
        : { content: `Done, from upstream ${target}.` }
    return body.stream === true ? chatSse(options) : chatJson(options)
  }

let upstreams: Array<FakeUpstream> = []

/** The gateway config: providers p0..p3 (one upstream each), the client model ids aliased to the routed targets. */
const documentOf = (): Json => {
  const targets = upstreams.map((_, i) => ({ model: `p${i}/m`, weight: WEIGHTS[i] }))
  const routed = { strategy: "weighted", affinity: "conversation", targets }
  return {
    adminKey: ADMIN,
    keys: [{ key: CLIENT_KEY, app: "agents" }],
    providers: Object.fromEntries(upstreams.map((u, i) => [`p${i}`, { type: "openai", baseUrl: u.url, apiKey: `upstream-key-${i}` }])),
    // what Codex, Claude Code and Gemini CLI send as model ids, mapped by the operator
    // `spread`: the same targets without affinity (the default, none)
    aliases: { "gpt-5.5": routed, "claude-opus-4-8": routed, "gemini-2.5-flash": routed, spread: { strategy: "weighted", targets } }
  }
}

const gateways: Array<TestGateway> = []
const gateway = async (seed: number): Promise<TestGateway> => {
  const gw = await startGateway(documentOf(), { random: mulberry32(seed) })
  gateways.push(gw)
  return gw
}

beforeAll(async () => {
  upstreams = await Promise.all(WEIGHTS.map(() => startFakeUpstream()))
  upstreams.forEach((u, i) => u.onRequest(answer(i)))
})
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()))
  await Promise.all(upstreams.map((u) => u.close()))
})

// ---------------------------------------------------------------------------------------------
// Reading what reached the upstreams
// ---------------------------------------------------------------------------------------------

/** One turn: the upstream requests it made, in order, each checked to carry this turn's marker. */
const turnOf = async (conversation: Conversation, gw: TestGateway): Promise<ReadonlyArray<Arrival>> => {
  const from = arrivals.length
  const marker = await conversation.turn(gw)
  const reached = arrivals.slice(from)
  for (const a of reached) expect(a.last, `${conversation.name}: what reached upstream ${a.target}`).toContain(marker)
  return reached
}

const brief = (reached: ReadonlyArray<Arrival>) => reached.map((a) => ({ target: a.target, refused: a.refused }))

/** One turn that reached exactly one upstream, which answered it: that upstream. */
const servedBy = async (conversation: Conversation, gw: TestGateway): Promise<number> => {
  const reached = await turnOf(conversation, gw)
  expect(reached, `${conversation.name}: ${JSON.stringify(brief(reached))}`).toHaveLength(1)
  expect(reached[0].refused).toBe(false)
  return reached[0].target
}

/** Every turn of a conversation (sent to the gateways in turn) reached the same single upstream: that one. */
const staysOnOne = async (conversation: Conversation, gws: ReadonlyArray<TestGateway>, turns = TURNS): Promise<number> => {
  const served: Array<number> = []
  for (let i = 0; i < turns; i++) served.push(await servedBy(conversation, gws[i % gws.length]))
  expect(served, conversation.name).toEqual(served.map(() => served[0]))
  return served[0]
}

/** The state of target p<n>/m on a gateway's status page (undefined: never called there). */
const stateOf = async (gw: TestGateway, target: number): Promise<unknown> => {
  const status = await get(gw, "/gateway/status", ADMIN)
  expect(status.status).toBe(200)
  const targets = records(parse(status).targets, "status targets")
  return targets.find((t) => t.target === `p${target}/m`)?.state
}

/** Waits (a backstop, not a timing assertion) until `target` is healthy again on `gw`. */
const recovered = async (gw: TestGateway, target: number) => {
  expect(await pollUntil(() => stateOf(gw, target), (s) => s === "healthy", 10_000, 100)).toBe("healthy")
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

describe("affinity: conversation — each conversation stays on one target for 10 turns", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await gateway(1)
  })

  it("Codex (Responses, store off, the whole history each turn) with its prompt_cache_key", async () => {
    await staysOnOne(codex("codex-keyed", { promptCacheKey: uuidOf("codex-keyed session") }), [gw])
  })

  it("Codex without prompt_cache_key: recognised by its developer items (0.169: no instructions) and first message", async () => {
    await staysOnOne(codex("codex-unkeyed", { promptCacheKey: null, instructions: false }), [gw])
  })

  it("Claude Code (Messages) with metadata.user_id, the cache marker moving to the newest turn", async () => {
    await staysOnOne(claudeCode("claude-keyed", claudeUser("claude-keyed")), [gw])
  })

  it("Claude Code without metadata: recognised by its system blocks and first message (cache markers ignored)", async () => {
    await staysOnOne(claudeCode("claude-unkeyed", null), [gw])
  })

  it("Gemini CLI 0.61 (session context and prompt in the first content), streamed and whole turns", async () => {
    await staysOnOne(geminiCli("gemini-061", "session-context"), [gw])
  })

  it("Gemini CLI, older shape (environment-context turn and the model's acknowledgement first)", async () => {
    await staysOnOne(geminiCli("gemini-ack", "acknowledged"), [gw])
  })

  it("a Responses chain (previous_response_id, store on)", async () => {
    await staysOnOne(responsesChain("chain"), [gw])
  })

  it("40 new conversations spread over every target, the weight-3 target taking the most", async () => {
    const counts = [0, 0, 0, 0]
    for (let i = 0; i < 40; i++) {
      const name = `many-${i}`
      const conversation =
        i % 4 === 0
          ? codex(name, { promptCacheKey: uuidOf(name) })
          : i % 4 === 1
            ? codex(name, { promptCacheKey: null, instructions: i % 8 === 1 })
            : i % 4 === 2
              ? claudeCode(name, i % 8 === 2 ? claudeUserJson(name) : null)
              : geminiCli(name, "session-context")
      counts[await servedBy(conversation, gw)]++
    }
    const where = `conversations per target: ${JSON.stringify(counts)}`
    for (const count of counts) expect(count, where).toBeGreaterThan(0)
    for (const count of counts.slice(1)) expect(counts[0], where).toBeGreaterThan(count)
  })
})

describe("a conversation whose target fails moves, and stays moved on this replica", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await gateway(2)
  })
  afterAll(() => limited.clear())

  it("429 + Retry-After: answered by the next target before any output; it stays there after the old target recovers, until it fails in turn", async () => {
    const conversation = claudeCode("mover", claudeUserJson("mover"))
    const home = await staysOnOne(conversation, [gw], 2)

    limited.add(home)
    const moving = await turnOf(conversation, gw)
    // the home target was asked once and refused; the next target answered the same turn
    expect(brief(moving)).toHaveLength(2)
    expect(moving[0]).toMatchObject({ target: home, refused: true })
    expect(moving[1].refused).toBe(false)
    const next = moving[1].target
    expect(next).not.toBe(home)
    // later turns go to the new target only
    expect(await staysOnOne(conversation, [gw], 2)).toBe(next)

    // the old target answers again and its cooldown is over: healthy on this replica...
    limited.delete(home)
    await recovered(gw, home)
    // ...and the conversation still stays where it went
    expect(await staysOnOne(conversation, [gw], 3)).toBe(next)

    // when the new target fails in turn, the conversation goes back to its first choice, and stays
    limited.add(next)
    const back = await turnOf(conversation, gw)
    expect(brief(back)).toEqual([
      { target: next, refused: true },
      { target: home, refused: false }
    ])
    limited.delete(next)
    expect(await staysOnOne(conversation, [gw], 2)).toBe(home)
  })
})

describe("two replicas with the same config and nothing shared", () => {
  let a: TestGateway
  let b: TestGateway
  beforeAll(async () => {
    a = await gateway(3)
    b = await gateway(4)
  })
  afterAll(() => limited.clear())

  it("the turns of one conversation sent alternately to each replica all reach the same target", async () => {
    await staysOnOne(codex("replicated-codex", { promptCacheKey: null }), [a, b])
    await staysOnOne(geminiCli("replicated-gemini", "session-context"), [a, b])
    await staysOnOne(claudeCode("replicated-claude", claudeUser("replicated-claude")), [a, b])
  })

  it("a move on replica A is A's alone: B keeps the original target while that one is healthy from B's point of view", async () => {
    const conversation = claudeCode("split", claudeUserJson("split"))
    const home = await staysOnOne(conversation, [a, b], 2)

    limited.add(home)
    const moving = await turnOf(conversation, a)
    expect(brief(moving)).toHaveLength(2)
    expect(moving[0]).toMatchObject({ target: home, refused: true })
    const next = moving[1].target
    expect(next).not.toBe(home)
    limited.delete(home)

    // B never saw the failure: its turns go to the original target, A's to where A moved it
    expect(await servedBy(conversation, b)).toBe(home)
    expect(await servedBy(conversation, a)).toBe(next)
    expect(await servedBy(conversation, b)).toBe(home)
    // still so once the old target is healthy again on A
    await recovered(a, home)
    expect(await servedBy(conversation, a)).toBe(next)
    expect(await servedBy(conversation, b)).toBe(home)
  })

  it("a replica that meets the failure itself moves the conversation to the same next target as the other", async () => {
    const conversation = geminiCli("both-move", "acknowledged")
    const home = await staysOnOne(conversation, [a, b], 2)

    limited.add(home)
    const onA = await turnOf(conversation, a)
    const onB = await turnOf(conversation, b)
    limited.delete(home)
    expect(brief(onA)).toHaveLength(2)
    expect(onA[0]).toMatchObject({ target: home, refused: true })
    expect(onA[1].target).not.toBe(home)
    // B computed the same order from the conversation alone
    expect(brief(onB)).toEqual(brief(onA))
    // both stay on it
    expect(await staysOnOne(conversation, [a, b], 4)).toBe(onA[1].target)
  })
})

describe("affinity: none (the default) — the same conversation's turns spread", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await gateway(5)
  })

  it("weighted without affinity sends the turns of one conversation to several targets; with affinity they stay", async () => {
    const spread: Array<number> = []
    const unpinned = codex("no-affinity", { promptCacheKey: uuidOf("no-affinity session"), model: "spread" })
    for (let i = 0; i < TURNS; i++) spread.push(await servedBy(unpinned, gw))
    expect(new Set(spread).size, JSON.stringify(spread)).toBeGreaterThan(1)

    await staysOnOne(codex("with-affinity", { promptCacheKey: uuidOf("no-affinity session") }), [gw])
  })
})

describe("affinity keyed by the client's session id, on every protocol", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await gateway(7)
  })

  /** One request whose first message is its own (so its history alone would route it anew), with or without a session header. */
  const send = async (protocol: "chat" | "responses" | "gemini" | "messages", first: string, session: Record<string, string>): Promise<number> => {
    const from = arrivals.length
    const headers = { "content-type": "application/json", authorization: `Bearer ${CLIENT_KEY}`, ...session }
    const [path, body] =
      protocol === "chat"
        ? ["/v1/chat/completions", { model: "gpt-5.5", messages: [{ role: "user", content: first }] }]
        : protocol === "responses"
          ? ["/v1/responses", { model: "gpt-5.5", input: first, store: false }]
          : protocol === "gemini"
            ? ["/v1beta/models/gemini-2.5-flash:generateContent", { contents: [{ role: "user", parts: [{ text: first }] }] }]
            : ["/v1/messages", { model: "claude-opus-4-8", max_tokens: 64, messages: [{ role: "user", content: first }] }]
    const response = await fetch(`${gw.url}${path}`, { method: "POST", headers: protocol === "messages" ? { ...headers, "anthropic-version": "2023-06-01" } : headers, body: JSON.stringify(body) })
    expect(response.status, await response.text()).toBe(200)
    const reached = arrivals.slice(from)
    expect(reached).toHaveLength(1)
    expect(reached[0].last).toContain(first)
    return reached[0].target
  }

  for (const [protocol, header] of [
    ["chat", "session-id"],
    ["responses", "session-id"],
    ["gemini", "x-claude-code-session-id"],
    ["messages", "x-claude-code-session-id"]
  ] as const) {
    it(`${protocol}: twelve different conversations under one ${header} all reach one target; without it they spread`, async () => {
      const firsts = Array.from({ length: 12 }, (_, i) => `${protocol} conversation ${i}: hello`)
      const spread = new Set<number>()
      for (const first of firsts) spread.add(await send(protocol, first, {}))
      expect(spread.size).toBeGreaterThan(1)
      const kept = new Set<number>()
      for (const first of firsts) kept.add(await send(protocol, `${first} again`, { [header]: `${protocol}-session-1` }))
      expect([...kept]).toHaveLength(1)
    })
  }
})
