/**
 * Prompt-cache breakpoint planning for one Messages-style request (spec 4.2, "Prompt caching").
 *
 * The request is modelled as plain data: a list of `Slot`s in request order (tools first, then
 * system parts, then message blocks), each saying whether the block may carry a breakpoint, the
 * caller's own `cache_control` TTL if any, and the gateway-placement role it plays. `planCache`
 * returns the TTL each slot is sent with (or `undefined` for no breakpoint).
 *
 * Rules and the decisions taken where the spec is silent:
 *
 * 1. Caller breakpoints. A caller `cache_control` is kept and counts among the (default four)
 *    breakpoints a request allows, caller and gateway together. A caller `cache_control` on a slot
 *    that is not `cacheable` cannot reach the model: it is ignored and does not count. If the
 *    caller used more breakpoints than allowed, the first ones in request order are kept and the
 *    rest are dropped (`droppedCaller` says how many); a dropped block's TTL has no effect at all
 *    (a dropped 1h block raises nothing).
 *
 * 2. Gateway breakpoints. While fewer than the allowed number are used, the gateway adds its own
 *    breakpoints on the slots with a role, in priority order lastTool, firstSystem, lastSystem,
 *    tail (ties within one role, which a well-formed slot list never has, in request order), only
 *    where no breakpoint already is and only on cacheable slots. Placement happens before any TTL
 *    is decided and does not depend on TTLs: raising to 1h never changes how many breakpoints
 *    there are, so "as far as the four slots allow" is settled by this one count. (A gateway
 *    breakpoint therefore never displaces a caller one, and the spec's "system-first, system-last
 *    and tail breakpoints before it are made 1h as far as the four slots allow" is exactly the
 *    gateway breakpoints placed here that sit before the last 1h block.)
 *
 * 3. TTLs. With `toolsReachModel` every breakpoint is 5m (a caller 1h is sent as 5m). Without,
 *    let L be the index of the last kept caller breakpoint with ttl 1h: every breakpoint at an
 *    index <= L (caller 5m, caller 1h, and the gateway's own, a last-tool one included when tools
 *    are present but do not reach the model) is 1h, every breakpoint after L is 5m. Without a kept
 *    caller 1h, everything is 5m. Hence every 1h breakpoint precedes every 5m one, always.
 *
 * `maxBreakpoints` defaults to 4; it can only lower the cap (it is floored and clamped to 0..4, NaN
 * means the default), so a plan never has more than four breakpoints.
 */

export type Ttl = "5m" | "1h"

export type SlotRole = "lastTool" | "firstSystem" | "lastSystem" | "tail"

/** A place a breakpoint can sit, in request order (tools first, then system parts, then message blocks). */
export interface Slot {
  readonly kind: "tool" | "system" | "message"
  /** the caller's own cache_control on this block, if any */
  readonly caller?: Ttl
  /** the block may carry a breakpoint (text, image, document, tool_result blocks; tools; system text) */
  readonly cacheable: boolean
  /** for the gateway's own placement: last tool; first/last system part; last text part of the last message */
  readonly role?: SlotRole
}

/** Who placed a breakpoint. */
export type BreakpointOrigin = "caller" | "gateway"

export interface CachePlan {
  /** the TTL each slot gets, or undefined for no breakpoint; same length and order as the slots */
  readonly ttls: ReadonlyArray<Ttl | undefined>
  /** who placed each breakpoint, or undefined for no breakpoint; same length and order as the slots */
  readonly origins: ReadonlyArray<BreakpointOrigin | undefined>
  /** caller breakpoints dropped because the caller used more than the allowed number */
  readonly droppedCaller: number
}

export interface CacheOptions {
  /** whether any tool reaches the model (caller or host tools, and `tool_choice` not none) */
  readonly toolsReachModel: boolean
  /** breakpoints a request allows, caller and gateway together; default and upper bound 4 */
  readonly maxBreakpoints?: number
}

export const DEFAULT_MAX_BREAKPOINTS = 4

/** Gateway placement priority (spec order). */
export const ROLE_PRIORITY: ReadonlyArray<SlotRole> = ["lastTool", "firstSystem", "lastSystem", "tail"]

const limitOf = (max: number | undefined): number => {
  if (max === undefined || Number.isNaN(max)) return DEFAULT_MAX_BREAKPOINTS
  return Math.min(DEFAULT_MAX_BREAKPOINTS, Math.max(0, Math.floor(max)))
}

export const planCache = (slots: ReadonlyArray<Slot>, options: CacheOptions): CachePlan => {
  const limit = limitOf(options.maxBreakpoints)
  const origins: Array<BreakpointOrigin | undefined> = slots.map(() => undefined)
  let used = 0
  let droppedCaller = 0
  // index of the last kept caller breakpoint asking for 1h
  let lastHour = -1

  // 1. caller breakpoints, first ones kept
  slots.forEach((slot, i) => {
    if (slot.caller === undefined || !slot.cacheable) return
    if (used >= limit) {
      droppedCaller += 1
      return
    }
    origins[i] = "caller"
    used += 1
    if (slot.caller === "1h") lastHour = i
  })

  // 2. gateway breakpoints by role priority, where free and cacheable, up to the limit
  for (const role of ROLE_PRIORITY) {
    for (let i = 0; i < slots.length && used < limit; i++) {
      const slot = slots[i]
      if (slot.role !== role || !slot.cacheable || origins[i] !== undefined) continue
      origins[i] = "gateway"
      used += 1
    }
  }

  // 3. TTLs: 1h up to and including the last caller 1h block (only without tools), 5m after
  const hourUntil = options.toolsReachModel ? -1 : lastHour
  const ttls = origins.map((origin, i): Ttl | undefined => (origin === undefined ? undefined : i <= hourUntil ? "1h" : "5m"))

  return { ttls, origins, droppedCaller }
}
