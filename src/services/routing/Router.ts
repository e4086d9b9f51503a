import { Context, Effect, Layer } from "effect"
import type { CanonicalRequest } from "../../domain/Canonical.js"
import { conversationKey, rendezvousOrder, weightedOrder } from "../../domain/Routing.js"
import { targetName, type ProviderTarget } from "../../providers/Provider.js"
import type { ResolvedModel, Route } from "./Catalog.js"
import { Health } from "./Health.js"

/** share of `lowest-latency` calls sent first to another target than the fastest, so that a recovered one is noticed */
export const PROBE_SHARE = 0.05

/** conversations remembered as moved (per replica): the oldest go first */
export const MAX_MOVED = 10_000

/** The targets by a figure of each, lowest first (ties in the order given), each figure read once. */
const sortedBy = (targets: ReadonlyArray<ProviderTarget>, figure: (target: ProviderTarget) => number): ReadonlyArray<ProviderTarget> =>
  targets
    .map((target) => ({ target, value: figure(target) }))
    .sort((a, b) => a.value - b.value)
    .map((s) => s.target)

/** The list with its `i`th element first, the others in their order. */
const toFront = <T>(list: ReadonlyArray<T>, i: number): ReadonlyArray<T> => [list[i], ...list.slice(0, i), ...list.slice(i + 1)]

/** The targets of one call in the order to try them, and the conversation it belongs to (with affinity). */
export interface Plan {
  readonly targets: ReadonlyArray<ProviderTarget>
  /** the alias and conversation key, and the target the conversation's key picks first */
  readonly conversation?: { readonly key: string; readonly home: string }
}

/**
 * Orders the targets of each call: by the alias's strategy, or for a recognised conversation (with
 * `affinity: conversation`) by its key, with the targets that are cooled on this replica last. A
 * conversation that had to leave its target stays where it went (on this replica) until that
 * target fails in turn.
 */
export class Router extends Context.Tag("gateway/Router")<
  Router,
  {
    readonly plan: (resolved: ResolvedModel, request: CanonicalRequest) => Effect.Effect<Plan>
    /** `target` answered the call: a conversation that moved stays there */
    readonly answered: (plan: Plan, target: ProviderTarget) => void
  }
>() {
  static readonly make = (random: () => number) =>
    Effect.map(Health, (health) => {
      /** alias and conversation key → the name of the target the conversation moved to */
      const moved = new Map<string, string>()
      /** where least-busy starts among targets equally busy, so that idle ones take turns */
      let turn = 0

      const byStrategy = (route: Route, targets: ReadonlyArray<ProviderTarget>): ReadonlyArray<ProviderTarget> => {
        switch (route.strategy) {
          case "ordered":
            return targets
          case "weighted":
            return weightedOrder(targets, route.weights, random)
          case "least-busy": {
            const start = turn++ % targets.length
            return sortedBy([...targets.slice(start), ...targets.slice(0, start)], (t) => health.load(targetName(t)).inFlight)
          }
          case "lowest-latency": {
            // a target never measured goes first (it is measured on its first call), unless it has
            // only failed so far: then it goes last, and probes find out when it answers
            const sorted = sortedBy(targets, (t) => {
              const load = health.load(targetName(t))
              return load.ttftMs ?? (load.errorRate > 0 ? Number.POSITIVE_INFINITY : -1)
            })
            if (random() >= PROBE_SHARE) return sorted
            const probe = 1 + Math.floor(random() * (sorted.length - 1))
            return toFront(sorted, probe)
          }
        }
      }

      const plan = (resolved: ResolvedModel, request: CanonicalRequest): Effect.Effect<Plan> => {
        const { route, targets } = resolved
        if (route === undefined || targets.length < 2) return Effect.map(health.order(targets), (ordered) => ({ targets: ordered }))
        const key = route.affinity ? conversationKey(request, request.conversation) : undefined
        if (key === undefined) return Effect.map(health.order(byStrategy(route, targets)), (ordered) => ({ targets: ordered }))
        const names = targets.map(targetName)
        const order = rendezvousOrder(key, targets, names, route.weights)
        const conversation = { key: `${route.alias}\u0000${key.text}`, home: targetName(order[0]) }
        const went = moved.get(conversation.key)
        const where = went === undefined ? -1 : order.findIndex((t) => targetName(t) === went)
        const preferred = where <= 0 ? order : toFront(order, where)
        return Effect.map(health.order(preferred), (ordered) => ({ targets: ordered, conversation }))
      }

      const answered = (plan: Plan, target: ProviderTarget) => {
        const conversation = plan.conversation
        if (conversation === undefined) return
        const name = targetName(target)
        if (name === conversation.home) {
          moved.delete(conversation.key)
          return
        }
        if (moved.get(conversation.key) === name) return
        moved.delete(conversation.key)
        if (moved.size >= MAX_MOVED) moved.delete(moved.keys().next().value as string)
        moved.set(conversation.key, name)
      }

      return Router.of({ plan, answered })
    })

  static readonly layer = Layer.effect(Router, Router.make(Math.random))

  /** with a given random source (a seeded one in tests) */
  static readonly layerWith = (random: () => number) => Layer.effect(Router, Router.make(random))
}
