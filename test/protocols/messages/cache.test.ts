/**
 * Prompt-cache breakpoint planning (spec 4.2, "Prompt caching"): table cases and fast-check
 * properties for `planCache`.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { planCache, type CacheOptions, type Slot, type SlotRole, type Ttl } from "../../../src/protocols/messages/Cache.js"

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const tool = (extra: Partial<Slot> = {}): Slot => ({ kind: "tool", cacheable: true, ...extra })
const sys = (extra: Partial<Slot> = {}): Slot => ({ kind: "system", cacheable: true, ...extra })
const msg = (extra: Partial<Slot> = {}): Slot => ({ kind: "message", cacheable: true, ...extra })

const NO_TOOLS: CacheOptions = { toolsReachModel: false }
const TOOLS: CacheOptions = { toolsReachModel: true }

/** A typical request: two tools, three system parts, four message blocks (the last a text part). */
const typical = (callers: Partial<Record<number, Ttl>> = {}): Array<Slot> => {
  const base: Array<Slot> = [
    tool(),
    tool({ role: "lastTool" }),
    sys({ role: "firstSystem" }),
    sys(),
    sys({ role: "lastSystem" }),
    msg(),
    msg(),
    msg(),
    msg({ role: "tail" })
  ]
  return base.map((slot, i) => (callers[i] === undefined ? slot : { ...slot, caller: callers[i] }))
}

interface Case {
  readonly name: string
  readonly slots: ReadonlyArray<Slot>
  readonly options: CacheOptions
  readonly ttls: ReadonlyArray<Ttl | undefined>
  readonly origins?: ReadonlyArray<"caller" | "gateway" | undefined>
  readonly dropped?: number
}

const _ = undefined
const C = "caller" as const
const G = "gateway" as const

const run = (cases: ReadonlyArray<Case>): void => {
  for (const c of cases) {
    it(c.name, () => {
      const plan = planCache(c.slots, c.options)
      expect(plan.ttls).toEqual(c.ttls)
      if (c.origins !== undefined) expect(plan.origins).toEqual(c.origins)
      expect(plan.droppedCaller).toBe(c.dropped ?? 0)
    })
  }
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

describe("planCache: gateway placement", () => {
  run([
    {
      name: "no caller breakpoints: the gateway's four roles, 5m",
      slots: typical(),
      options: TOOLS,
      ttls: [_, "5m", "5m", _, "5m", _, _, _, "5m"],
      origins: [_, G, G, _, G, _, _, _, G]
    },
    {
      name: "no caller breakpoints, no tools: still all 5m",
      slots: [sys({ role: "firstSystem" }), sys({ role: "lastSystem" }), msg(), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["5m", "5m", _, "5m"],
      origins: [G, G, _, G]
    },
    {
      name: "empty request: nothing",
      slots: [],
      options: NO_TOOLS,
      ttls: []
    },
    {
      name: "no role slots: nothing",
      slots: [msg(), msg(), sys()],
      options: NO_TOOLS,
      ttls: [_, _, _]
    },
    {
      name: "one caller breakpoint: the gateway fills three by priority (tail left out)",
      slots: typical({ 6: "5m" }),
      options: TOOLS,
      ttls: [_, "5m", "5m", _, "5m", _, "5m", _, _],
      origins: [_, G, G, _, G, _, C, _, _]
    },
    {
      name: "two caller breakpoints: lastTool and firstSystem only",
      slots: typical({ 5: "5m", 7: "5m" }),
      options: TOOLS,
      ttls: [_, "5m", "5m", _, _, "5m", _, "5m", _],
      origins: [_, G, G, _, _, C, _, C, _]
    },
    {
      name: "caller uses four: the gateway adds none",
      slots: typical({ 0: "5m", 3: "5m", 5: "5m", 6: "5m" }),
      options: TOOLS,
      ttls: ["5m", _, _, "5m", _, "5m", "5m", _, _],
      origins: [C, _, _, C, _, C, C, _, _]
    },
    {
      name: "caller breakpoint already on a role slot: the gateway does not double it and moves on",
      slots: typical({ 1: "5m", 2: "5m", 4: "5m" }),
      options: TOOLS,
      ttls: [_, "5m", "5m", _, "5m", _, _, _, "5m"],
      origins: [_, C, C, _, C, _, _, _, G]
    },
    {
      name: "non-cacheable role slots are skipped (tail on a non-cacheable block, lastSystem too)",
      slots: [tool({ role: "lastTool" }), sys({ role: "firstSystem" }), sys({ role: "lastSystem", cacheable: false }), msg({ role: "tail", cacheable: false })],
      options: TOOLS,
      ttls: ["5m", "5m", _, _],
      origins: [G, G, _, _]
    },
    {
      name: "a skipped role does not use up a slot",
      slots: [tool({ role: "lastTool", cacheable: false }), sys({ role: "firstSystem" }), sys({ role: "lastSystem" }), msg({ caller: "5m" }), msg({ role: "tail" })],
      options: TOOLS,
      ttls: [_, "5m", "5m", "5m", "5m"],
      origins: [_, G, G, C, G]
    },
    {
      name: "single system part (firstSystem only) and no tools",
      slots: [sys({ role: "firstSystem" }), msg(), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["5m", _, "5m"]
    },
    {
      name: "maxBreakpoints 2 caps the gateway",
      slots: typical(),
      options: { toolsReachModel: true, maxBreakpoints: 2 },
      ttls: [_, "5m", "5m", _, _, _, _, _, _]
    },
    {
      name: "maxBreakpoints above 4 is capped at 4",
      slots: [...typical(), msg({ role: "tail" })],
      options: { toolsReachModel: true, maxBreakpoints: 9 },
      ttls: [_, "5m", "5m", _, "5m", _, _, _, "5m", _]
    },
    {
      name: "maxBreakpoints 0: nothing, caller dropped",
      slots: typical({ 5: "1h" }),
      options: { toolsReachModel: false, maxBreakpoints: 0 },
      ttls: [_, _, _, _, _, _, _, _, _],
      dropped: 1
    }
  ])
})

describe("planCache: caller breakpoints", () => {
  run([
    {
      name: "more than four caller breakpoints: the first four kept, the rest dropped",
      slots: [msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "5m", role: "tail" })],
      options: TOOLS,
      ttls: ["5m", "5m", "5m", "5m", _, _],
      origins: [C, C, C, C, _, _],
      dropped: 2
    },
    {
      name: "a dropped fifth 1h block raises nothing",
      slots: [msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "1h" })],
      options: NO_TOOLS,
      ttls: ["5m", "5m", "5m", "5m", _],
      dropped: 1
    },
    {
      name: "caller cache_control on a non-cacheable block is ignored and does not count",
      slots: [sys({ role: "firstSystem" }), msg({ caller: "1h", cacheable: false }), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["5m", _, "5m"],
      origins: [G, _, G]
    }
  ])
})

describe("planCache: 1-hour TTL", () => {
  run([
    {
      name: "caller 1h without tools: earlier breakpoints raised, later ones 5m",
      slots: typical({ 6: "1h" }),
      options: NO_TOOLS,
      ttls: [_, "1h", "1h", _, "1h", _, "1h", _, _],
      origins: [_, G, G, _, G, _, C, _, _]
    },
    {
      name: "caller 1h in the system with a caller 5m after: gateway system-first raised, tail 5m",
      slots: [sys({ role: "firstSystem" }), sys({ role: "lastSystem", caller: "1h" }), msg({ caller: "5m" }), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["1h", "1h", "5m", "5m"],
      origins: [G, C, C, G]
    },
    {
      name: "caller 5m before a caller 1h is raised to 1h",
      slots: [sys({ caller: "5m" }), msg({ caller: "1h" }), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["1h", "1h", "5m"]
    },
    {
      name: "caller 1h on the tail: everything is 1h",
      slots: [sys({ role: "firstSystem" }), sys({ role: "lastSystem" }), msg(), msg({ role: "tail", caller: "1h" })],
      options: NO_TOOLS,
      ttls: ["1h", "1h", _, "1h"],
      origins: [G, G, _, C]
    },
    {
      name: "caller 1h with tools: sent as 5m",
      slots: typical({ 6: "1h" }),
      options: TOOLS,
      ttls: [_, "5m", "5m", _, "5m", _, "5m", _, _]
    },
    {
      name: "tools present but not reaching the model (tool_choice none): 1h allowed, last-tool raised",
      slots: typical({ 7: "1h" }),
      options: NO_TOOLS,
      ttls: [_, "1h", "1h", _, "1h", _, _, "1h", _]
    },
    {
      name: "multiple 1h blocks: the last one decides, 5m between them raised",
      slots: [sys({ caller: "1h" }), msg({ caller: "5m" }), msg({ caller: "1h" }), msg({ caller: "5m" }), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["1h", "1h", "1h", "5m", _],
      origins: [C, C, C, C, _]
    },
    {
      name: "multiple 1h blocks with tools: all 5m",
      slots: [sys({ caller: "1h" }), msg({ caller: "1h" }), msg({ role: "tail" })],
      options: TOOLS,
      ttls: ["5m", "5m", "5m"]
    },
    {
      name: "1h on the first system part: gateway breakpoints after it (last system, tail) stay 5m",
      slots: [sys({ role: "firstSystem", caller: "1h" }), sys({ role: "lastSystem" }), msg({ caller: "5m" }), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: ["1h", "5m", "5m", "5m"],
      origins: [C, G, C, G]
    },
    {
      name: "four slots full: no gateway breakpoint to raise, caller ones raised up to the last 1h",
      slots: [sys({ role: "firstSystem" }), msg({ caller: "5m" }), msg({ caller: "5m" }), msg({ caller: "1h" }), msg({ caller: "5m" }), msg({ role: "tail" })],
      options: NO_TOOLS,
      ttls: [_, "1h", "1h", "1h", "5m", _]
    }
  ])
})

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

const ttlArb: fc.Arbitrary<Ttl | undefined> = fc.constantFrom<Ttl | undefined>(undefined, undefined, "5m", "1h")
const roleArb: fc.Arbitrary<SlotRole | undefined> = fc.constantFrom<SlotRole | undefined>(undefined, undefined, "lastTool", "firstSystem", "lastSystem", "tail")

const slotArb: fc.Arbitrary<Slot> = fc
  .record({
    kind: fc.constantFrom<Slot["kind"]>("tool", "system", "message"),
    caller: ttlArb,
    cacheable: fc.boolean(),
    role: roleArb
  })
  .map(({ kind, caller, cacheable, role }): Slot => ({
    kind,
    cacheable,
    ...(caller === undefined ? {} : { caller }),
    ...(role === undefined ? {} : { role })
  }))

const optionsArb: fc.Arbitrary<CacheOptions> = fc.record(
  { toolsReachModel: fc.boolean(), maxBreakpoints: fc.integer({ min: 0, max: 6 }) },
  { requiredKeys: ["toolsReachModel"] }
)

const indexesOf = <A>(xs: ReadonlyArray<A>, p: (a: A) => boolean): Array<number> => xs.flatMap((x, i) => (p(x) ? [i] : []))

describe("planCache: properties", () => {
  it("never more than the allowed breakpoints, ordering holds, callers first kept, no 1h with tools", () => {
    fc.assert(
      fc.property(fc.array(slotArb, { maxLength: 14 }), optionsArb, (slots, options) => {
        const limit = Math.min(4, options.maxBreakpoints ?? 4)
        const plan = planCache(slots, options)
        expect(plan.ttls.length).toBe(slots.length)
        expect(plan.origins.length).toBe(slots.length)

        const placed = indexesOf(plan.ttls, (t) => t !== undefined)
        expect(placed.length).toBeLessThanOrEqual(limit)
        expect(placed.length).toBeLessThanOrEqual(4)

        // breakpoints only on cacheable slots
        for (const i of placed) expect(slots[i].cacheable).toBe(true)

        // the first `limit` cacheable caller breakpoints are kept, as caller ones; the rest dropped
        const callers = indexesOf(slots, (s) => s.caller !== undefined && s.cacheable)
        for (const i of callers.slice(0, limit)) expect(plan.origins[i]).toBe("caller")
        for (const i of callers.slice(limit)) expect(plan.ttls[i]).toBeUndefined()
        expect(plan.droppedCaller).toBe(Math.max(0, callers.length - limit))

        // gateway breakpoints only on role slots without a caller breakpoint, and only when room was left
        for (const i of indexesOf(plan.origins, (o) => o === "gateway")) {
          expect(slots[i].role).toBeDefined()
          expect(plan.origins[i]).toBe("gateway")
          expect(callers.slice(0, limit)).not.toContain(i)
        }

        // the gateway fills up to the limit when cacheable, free role slots remain
        const freeRoles = indexesOf(slots, (s) => s.role !== undefined && s.cacheable).filter((i) => plan.origins[i] === undefined)
        if (freeRoles.length > 0) expect(placed.length).toBe(limit)

        // no 1h when tools reach the model
        if (options.toolsReachModel) expect(plan.ttls).not.toContain("1h")

        // every 1h precedes every 5m
        const hours = indexesOf(plan.ttls, (t) => t === "1h")
        const fives = indexesOf(plan.ttls, (t) => t === "5m")
        if (hours.length > 0 && fives.length > 0) expect(Math.max(...hours)).toBeLessThan(Math.min(...fives))

        // 1h appears exactly when a kept caller 1h exists and no tools reach the model, and ends on it
        const keptHours = callers.slice(0, limit).filter((i) => slots[i].caller === "1h")
        if (options.toolsReachModel || keptHours.length === 0) expect(hours).toEqual([])
        else expect(Math.max(...hours)).toBe(Math.max(...keptHours))
      }),
      { numRuns: 2000 }
    )
  })

  it("is deterministic and independent of kind", () => {
    fc.assert(
      fc.property(fc.array(slotArb, { maxLength: 10 }), optionsArb, (slots, options) => {
        const relabelled = slots.map((s): Slot => ({ ...s, kind: "message" }))
        expect(planCache(relabelled, options)).toEqual(planCache(slots, options))
      })
    )
  })
})
