/**
 * Target health (issue 18): cooldowns from Retry-After or from failures in a window with a
 * doubling backoff, the half-open probe, and the order targets are tried in. On a TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { UpstreamError } from "../../../src/domain/Errors.js"
import type { ProviderTarget } from "../../../src/providers/Provider.js"
import { FIRST_BACKOFF_MS, Health } from "../../../src/services/routing/Health.js"

const target = (model: string): ProviderTarget => ({ provider: "p", providerType: "openai", model, id: `p/${model}` })
const a = target("a")
const b = target("b")
const c = target("c")
const failure = (retryAfter?: number) => new UpstreamError({ reason: "server_error", provider: "p", message: "failed", ...(retryAfter !== undefined ? { retryAfter } : {}) })
const ids = (targets: ReadonlyArray<ProviderTarget>) => targets.map((t) => t.model)

describe("Health", () => {
  it.effect("Retry-After cools a target for that long; it is tried last meanwhile, then probed once", () =>
    Effect.gen(function* () {
      const health = yield* Health.make
      yield* health.failed(a, failure(2))
      expect(ids(yield* health.order([a, b, c]))).toEqual(["b", "c", "a"])
      yield* TestClock.adjust(2000)
      expect(ids(yield* health.order([a, b, c]))).toEqual(["a", "b", "c"])
      // the probe: while it runs, the others keep away from a
      health.take(a)
      expect(ids(yield* health.order([a, b, c]))).toEqual(["b", "c", "a"])
      health.succeeded(a, 5)
      expect(ids(yield* health.order([a, b, c]))).toEqual(["a", "b", "c"])
    })
  )

  it.effect("three failures in the window cool a target; each cooldown in a row doubles; a failed probe cools it again", () =>
    Effect.gen(function* () {
      const health = yield* Health.make
      yield* health.failed(a, failure())
      yield* health.failed(a, failure())
      expect(ids(yield* health.order([a, b]))).toEqual(["a", "b"])
      yield* health.failed(a, failure())
      expect((yield* health.states)[0]).toMatchObject({ target: "p/a", state: "cooled" })
      yield* TestClock.adjust(FIRST_BACKOFF_MS)
      health.take(a)
      yield* health.failed(a, failure())
      // the second cooldown lasts twice the first
      yield* TestClock.adjust(FIRST_BACKOFF_MS)
      expect(ids(yield* health.order([a, b]))).toEqual(["b", "a"])
      yield* TestClock.adjust(FIRST_BACKOFF_MS)
      expect(ids(yield* health.order([a, b]))).toEqual(["a", "b"])
    })
  )

  it.effect("a refusal of the request (not retryable) says nothing of the target's health", () =>
    Effect.gen(function* () {
      const health = yield* Health.make
      for (let i = 0; i < 5; i++) yield* health.failed(a, new UpstreamError({ reason: "bad_request", provider: "p", message: "bad" }))
      expect(ids(yield* health.order([a, b]))).toEqual(["a", "b"])
    })
  )

  it.effect("with every target cooled, the one whose cooldown ends first comes first; a cancelled probe frees the next call to probe", () =>
    Effect.gen(function* () {
      const health = yield* Health.make
      yield* health.failed(a, failure(5))
      yield* health.failed(b, failure(2))
      expect(ids(yield* health.order([a, b]))).toEqual(["b", "a"])
      yield* TestClock.adjust(2000)
      health.take(b)
      health.released(b)
      expect(ids(yield* health.order([a, b]))).toEqual(["b", "a"])
    })
  )
})
