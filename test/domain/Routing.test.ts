/**
 * The pure parts of routing (issue 18): the weighted random order of the `weighted` strategy, the
 * weighted rendezvous order of conversation affinity, and the key a conversation is recognised by.
 *
 * The statistical checks draw from a seeded PRNG (mulberry32, ROUTING_SEED) or from fixed key
 * names, so each is deterministic: the same counts on every run. The tolerances are still chosen
 * so that a correct implementation lands inside them for any seed (each is at least four
 * standard deviations of the count at that sample size), while a wrong weighting (for example
 * uniform, or the weights inverted) lands far outside.
 */
import { describe, expect, it } from "vitest"
import type { CanonicalRequest, Message } from "../../src/domain/Canonical.js"
import { conversationKey, rendezvousOrder, weightedOrder, type ConversationKey } from "../../src/domain/Routing.js"
import { mulberry32, ROUTING_SEED } from "../support/Prng.js"

const DRAWS = 20_000

/** Shares in percent of each name among `picks`. */
const sharesOf = (names: ReadonlyArray<string>, picks: ReadonlyArray<string>): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const name of names) out[name] = (100 * picks.filter((p) => p === name).length) / picks.length
  return out
}

/** Every share within `tolerance` percentage points of its expectation (the message shows both). */
const expectShares = (actual: Record<string, number>, expected: Record<string, number>, tolerance: number) => {
  for (const [name, want] of Object.entries(expected)) {
    expect(Math.abs(actual[name] - want), `share of ${name}: ${actual[name].toFixed(2)}% (expected ${want.toFixed(2)}% ± ${tolerance})`).toBeLessThanOrEqual(tolerance)
  }
}

describe("weightedOrder (the weighted strategy)", () => {
  const targets = ["a", "b", "c"] as const
  const weights = [3, 1, 1]

  it("weights 3:1:1 over 20,000 draws: the first pick is each target in proportion to its weight (± 1.5 points)", () => {
    // expected 60 / 20 / 20 %; one standard deviation at 20,000 draws is 0.35 points for 60 %
    // and 0.28 points for 20 %, so ± 1.5 points is more than 4 of them
    const random = mulberry32(ROUTING_SEED)
    const firsts: Array<string> = []
    for (let i = 0; i < DRAWS; i++) {
      const order = weightedOrder(targets, weights, random)
      // every draw is an order of all the targets, each once
      expect([...order].sort()).toEqual(["a", "b", "c"])
      firsts.push(order[0])
    }
    expectShares(sharesOf(targets, firsts), { a: 60, b: 20, c: 20 }, 1.5)
  })

  it("the second pick is in proportion to the weights of the targets left (± 2.5 points)", () => {
    // after a (weight 3) the rest are b:c = 1:1 (50 / 50 %); after b they are a:c = 3:1 (75 / 25 %),
    // after c a:b = 3:1. The conditional samples are smaller (about 12,000 after a, 4,000 after
    // b or c: one standard deviation 0.7 points at 75 % of 4,000), hence ± 2.5 points.
    const random = mulberry32(ROUTING_SEED + 1)
    const after: Record<string, Array<string>> = { a: [], b: [], c: [] }
    for (let i = 0; i < DRAWS; i++) {
      const order = weightedOrder(targets, weights, random)
      after[order[0]].push(order[1])
    }
    expectShares(sharesOf(targets, after.a), { b: 50, c: 50 }, 2.5)
    expectShares(sharesOf(targets, after.b), { a: 75, c: 25 }, 2.5)
    expectShares(sharesOf(targets, after.c), { a: 75, b: 25 }, 2.5)
    // unconditionally the second pick is a 30 %, b 35 %, c 35 % (0.34 points a deviation)
    const seconds = [...after.a, ...after.b, ...after.c]
    expectShares(sharesOf(targets, seconds), { a: 30, b: 35, c: 35 }, 1.5)
  })

  it("the two-target fast path: weights 3:1 put the first target first 75 % of the time (± 1.5 points)", () => {
    // one standard deviation at 20,000 draws and 75 %: 0.31 points
    const random = mulberry32(ROUTING_SEED + 2)
    const firsts: Array<string> = []
    for (let i = 0; i < DRAWS; i++) {
      const order = weightedOrder(["x", "y"], [3, 1], random)
      expect([...order].sort()).toEqual(["x", "y"])
      firsts.push(order[0])
    }
    expectShares(sharesOf(["x", "y"], firsts), { x: 75, y: 25 }, 1.5)
    // and the other way round: the weight follows the target, not the position
    const reversed: Array<string> = []
    for (let i = 0; i < DRAWS; i++) reversed.push(weightedOrder(["x", "y"], [1, 3], random)[0])
    expectShares(sharesOf(["x", "y"], reversed), { x: 25, y: 75 }, 1.5)
  })
})

/** A key as a conversation's would be: from a pinned id, so that the test's keys are fixed names. */
const keyOf = (id: string): ConversationKey => conversationKey(emptyRequest, id) as ConversationKey

const emptyRequest: CanonicalRequest = {
  system: [],
  messages: [],
  tools: [],
  toolChoice: { type: "auto" },
  sampling: {},
  parallelToolCalls: true,
  stream: false
}

describe("rendezvousOrder (conversation affinity)", () => {
  const names = ["a/m", "b/m", "c/m", "d/m"]
  const weights = [3, 1, 1, 1]
  const keys = Array.from({ length: DRAWS }, (_, i) => keyOf(`conversation-${i}`))

  it("weights 3:1:1:1 over 20,000 keys: the first choice is each target in proportion to its weight (± 1.5 points)", () => {
    // expected 50 / 16.7 / 16.7 / 16.7 %; one standard deviation 0.35 and 0.26 points
    const firsts = keys.map((key) => rendezvousOrder(key, names, names, weights)[0])
    expectShares(sharesOf(names, firsts), { "a/m": 50, "b/m": 100 / 6, "c/m": 100 / 6, "d/m": 100 / 6 }, 1.5)
  })

  it("the same key gives the same order every time, whatever order the targets are listed in", () => {
    keys.slice(0, 500).forEach((key, i) => {
      const order = rendezvousOrder(key, names, names, weights)
      expect([...order].sort()).toEqual(names)
      // again, and from a key made anew from the same conversation id
      expect(rendezvousOrder(key, names, names, weights)).toEqual(order)
      expect(rendezvousOrder(keyOf(`conversation-${i}`), names, names, weights)).toEqual(order)
      // another replica may list the targets in another order: the order follows the names
      const reversed = [...names].reverse()
      expect(rendezvousOrder(key, reversed, reversed, [...weights].reverse())).toEqual(order)
    })
  })

  it("removing a target moves only the conversations whose first choice it was, each to its previous second choice", () => {
    for (const gone of names) {
      const left = names.filter((n) => n !== gone)
      const leftWeights = weights.filter((_, i) => names[i] !== gone)
      let moved = 0
      /** keys whose order without `gone` is not their order before with `gone` taken out */
      const wrong: Array<string> = []
      for (const key of keys) {
        const before = rendezvousOrder(key, names, names, weights)
        const after = rendezvousOrder(key, left, left, leftWeights)
        // the rest keep their relative order: each conversation's fallbacks are unchanged, so a
        // conversation that stays keeps its first choice and one that moves goes to its second
        if (after.join() !== before.filter((n) => n !== gone).join()) wrong.push(`${key.text}: ${before.join()} -> ${after.join()}`)
        if (before[0] === gone) {
          moved++
          if (after[0] !== before[1]) wrong.push(`${key.text}: moved to ${after[0]}, not to its second choice ${before[1]}`)
        } else if (after[0] !== before[0]) wrong.push(`${key.text}: moved from ${before[0]} though ${gone} left`)
      }
      expect(wrong.slice(0, 5), `${wrong.length} keys`).toEqual([])
      // the conversations that moved are those of the target that left: its share of the weights
      const share = (100 * weights[names.indexOf(gone)]) / 6
      expect(Math.abs((100 * moved) / keys.length - share), `${gone} left: ${moved} of ${keys.length} moved`).toBeLessThanOrEqual(1.5)
    }
  })
})

describe("conversationKey", () => {
  const text = (t: string) => ({ type: "text" as const, text: t })
  const request = (system: ReadonlyArray<string>, messages: ReadonlyArray<Message>): CanonicalRequest => ({ ...emptyRequest, system: system.map(text), messages })
  const user = (t: string): Message => ({ role: "user", parts: [text(t)] })
  const assistant = (t: string): Message => ({ role: "assistant", parts: [text(t)] })

  const system = ["You are a careful assistant.", "Answer briefly."]
  const first = user("Plan a trip to Lisbon.")
  const turn1 = request(system, [first])
  const turn2 = request(system, [first, assistant("Day 1: Alfama."), user("And day 2?")])
  const turn3 = request(system, [
    first,
    assistant("Day 1: Alfama."),
    user("And day 2?"),
    { role: "assistant", parts: [text("Let me look."), { type: "tool_call", id: "call_1", name: "weather", arguments: '{"city":"Lisbon"}' }] },
    { role: "tool", parts: [{ type: "tool_result", callId: "call_1", content: [text("sunny")] }] }
  ])

  it("is the same for every turn of one conversation (system prompt and first message unchanged while the history grows)", () => {
    const key = conversationKey(turn1, undefined)
    expect(key).toBeDefined()
    expect(conversationKey(turn2, undefined)).toEqual(key)
    expect(conversationKey(turn3, undefined)).toEqual(key)
  })

  it("differs for another first message, another system prompt, or the first message's role", () => {
    const key = conversationKey(turn1, undefined)
    expect(conversationKey(request(system, [user("Plan a trip to Porto.")]), undefined)?.text).not.toBe(key?.text)
    expect(conversationKey(request(["You are a terse assistant."], [first]), undefined)?.text).not.toBe(key?.text)
    expect(conversationKey(request([], [first]), undefined)?.text).not.toBe(key?.text)
    expect(conversationKey(request(system, [assistant("Plan a trip to Lisbon.")]), undefined)?.text).not.toBe(key?.text)
    // the boundary between the system parts counts: two parts are not their concatenation
    expect(conversationKey(request(["ab", "c"], [first]), undefined)?.text).not.toBe(conversationKey(request(["a", "bc"], [first]), undefined)?.text)
  })

  it("cache markers do not change it (clients move them from turn to turn)", () => {
    const noSystem = request([], [first])
    const cached: CanonicalRequest = {
      ...emptyRequest,
      system: [{ type: "text", text: system[0] }, { type: "text", text: system[1], cache: { ttl: "1h" } }],
      messages: [{ role: "user", parts: [{ type: "text", text: "Plan a trip to Lisbon.", cache: { ttl: "5m" } }] }, assistant("Day 1: Alfama.")]
    }
    expect(conversationKey(cached, undefined)).toEqual(conversationKey(turn1, undefined))
    expect(conversationKey({ ...noSystem, messages: [{ role: "user", parts: [{ type: "text", text: "Plan a trip to Lisbon.", cache: { ttl: "1h" } }] }] }, undefined)).toEqual(
      conversationKey(noSystem, undefined)
    )
  })

  it("a pinned id (prompt_cache_key, metadata.user_id) overrides the history", () => {
    const pinned = conversationKey(turn1, "conv-42")
    expect(pinned).toBeDefined()
    // the same pinned id over unrelated histories: one conversation
    expect(conversationKey(request(["other"], [user("something else")]), "conv-42")).toEqual(pinned)
    expect(conversationKey(emptyRequest, "conv-42")).toEqual(pinned)
    // not the history's own key, and another id is another conversation
    expect(pinned?.text).not.toBe(conversationKey(turn1, undefined)?.text)
    expect(conversationKey(turn1, "conv-43")?.text).not.toBe(pinned?.text)
    // an empty id is no id: the history decides
    expect(conversationKey(turn1, "")).toEqual(conversationKey(turn1, undefined))
  })

  it("is undefined for an empty request (nothing to recognise), and defined by a system prompt alone", () => {
    expect(conversationKey(emptyRequest, undefined)).toBeUndefined()
    expect(conversationKey(emptyRequest, "")).toBeUndefined()
    expect(conversationKey(request(system, []), undefined)).toBeDefined()
  })

  it("a key's parts: 24 hex characters of text and two 32-bit words", () => {
    const key = conversationKey(turn2, undefined) as ConversationKey
    expect(key.text).toMatch(/^[0-9a-f]{24}$/)
    for (const word of [key.hi, key.lo]) {
      expect(Number.isInteger(word)).toBe(true)
      expect(word).toBeGreaterThanOrEqual(0)
      expect(word).toBeLessThan(2 ** 32)
    }
    // the words are the first 8 bytes of the text
    expect(key.hi).toBe(Number.parseInt(key.text.slice(0, 8), 16))
    expect(key.lo).toBe(Number.parseInt(key.text.slice(8, 16), 16))
  })
})
