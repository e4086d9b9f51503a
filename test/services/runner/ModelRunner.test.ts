import { describe, expect, it, layer } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, Fiber, Option, Stream, TestClock } from "effect"
import { ModelEvent, type CanonicalRequest } from "../../../src/domain/Canonical.js"
import { UpstreamError } from "../../../src/domain/Errors.js"
import { Catalog } from "../../../src/services/routing/Catalog.js"
import { Limits } from "../../../src/services/runner/Limits.js"
import { dropUnsupported, ModelRunner, type RunOptions } from "../../../src/services/runner/ModelRunner.js"
import { configOf } from "../../support/Gateway.js"
import { runnerLayer, scriptedProviders, takeCalls, type Script } from "./ScriptedProvider.js"

const retryable = ["rate_limited", "overloaded", "unavailable", "server_error", "connection", "timeout", "bad_response"] as const
const fatal = [
  { reason: "bad_request", status: 400, code: "upstream_bad_request" },
  { reason: "auth", status: 502, code: "upstream_auth_failed" }
] as const
const reasons: ReadonlyArray<UpstreamError["reason"]> = [...retryable, ...fatal.map((f) => f.reason)]

const config = configOf({
  accessLog: false,
  concurrency: 1,
  requestTimeoutMs: 1000,
  providers: {
    a: { type: "mock", rejects: ["temperature"], models: { picky: { rejects: ["top_p", "seed"] } } },
    b: { type: "mock" },
    slow: { type: "mock" }
  },
  aliases: {
    ...Object.fromEntries(reasons.map((r) => [`fallback-${r}`, { targets: [`a/fail-${r}`, "b/ok"] }])),
    midway: { targets: ["a/midway", "b/ok"] },
    allfail: { targets: ["a/fail-overloaded", "b/fail-unavailable"] },
    defect: { targets: ["a/unscripted", "b/ok"] }
  }
})

const usage = { inputTokens: 3, outputTokens: 2, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 }
const okEvents: ReadonlyArray<ModelEvent> = [ModelEvent.text("hel"), ModelEvent.text("lo"), ModelEvent.usage(usage), ModelEvent.finish("stop")]
const failures = new Map(reasons.map((r) => [`fail-${r}`, r]))
const late = Stream.fromEffect(Effect.sleep("10 seconds").pipe(Effect.as(ModelEvent.text("late"))))

/** What each scripted model answers; anything else dies in the double. */
const script: Script = (call) => {
  const model = call.target.model
  const failure = failures.get(model)
  if (failure !== undefined) return Stream.fail(new UpstreamError({ reason: failure, provider: call.target.provider, message: "scripted failure" }))
  switch (model) {
    case "ok":
    case "picky":
      return Stream.fromIterable(okEvents)
    case "midway":
      return Stream.make(ModelEvent.text("partial")).pipe(Stream.concat(Stream.fail(new UpstreamError({ reason: "server_error", provider: call.target.provider, message: "scripted failure" }))))
    case "slow":
      return late
    case "slow-after-first":
      return Stream.make(ModelEvent.text("first")).pipe(Stream.concat(late))
    default:
      return undefined
  }
}

const request: CanonicalRequest = {
  system: [],
  messages: [{ role: "user", parts: [{ type: "text", text: "hi" }] }],
  tools: [],
  toolChoice: { type: "auto" },
  sampling: {},
  parallelToolCalls: true,
  stream: true
}

const options = (model: string, over: Partial<RunOptions>) =>
  Effect.map(Catalog, (catalog): RunOptions => ({ model, request, app: catalog.app("default"), deadline: Date.now() + config.requestTimeoutMs, ...over }))

/** The whole answer for the keyless default app, as the non-streamed routes ask for it. */
const complete = (model: string, over: Partial<RunOptions> = {}) =>
  Effect.flatMap(Effect.zip(ModelRunner, options(model, over)), ([runner, opts]) => runner.complete(opts))

/** Start a run for the keyless default app, with the config's 1 s deadline from now (wall clock, as the edge sets it). */
const start = (model: string, over: Partial<RunOptions> = {}) =>
  Effect.flatMap(Effect.zip(ModelRunner, options(model, over)), ([runner, opts]) => runner.start(opts))

const calledIds = Effect.map(takeCalls, (calls) => calls.map((c) => c.target.id))
const inFlight = Effect.map(Limits, (limits) => limits.inFlight().modelRequests)

/** Wait (yielding, bounded) until at least n sleeps are scheduled on the TestClock. */
const awaitSleeps = (n: number) =>
  Effect.yieldNow().pipe(
    Effect.zipRight(TestClock.sleeps()),
    Effect.repeat({ until: (sleeps) => Chunk.size(sleeps) >= n, times: 10_000 }),
    Effect.tap((sleeps) => Effect.sync(() => expect(Chunk.size(sleeps)).toBeGreaterThanOrEqual(n)))
  )

layer(runnerLayer(config, scriptedProviders(script)))("ModelRunner", (it) => {
  it.scoped("runs a <provider>/<model> id and replays every event, the first included", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const run = yield* start("b/ok")
      expect(run.target.id).toBe("b/ok")
      expect(run.sessionId).toMatch(/^ses_[0-9a-f]{32}$/)
      expect(Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.repeatEffectChunkOption(run.pull)))).toEqual(okEvents)
      expect(yield* calledIds).toEqual(["b/ok"])
    })
  )

  it.scoped("falls back to the next alias target on a retryable failure before the first event", () =>
    Effect.gen(function* () {
      yield* takeCalls
      for (const reason of retryable) {
        const events = yield* Effect.scoped(
          Effect.gen(function* () {
            const run = yield* start(`fallback-${reason}`)
            expect(run.target.id).toBe("b/ok")
            return yield* Stream.runCollect(Stream.repeatEffectChunkOption(run.pull))
          })
        )
        expect(Chunk.toReadonlyArray(events)).toEqual(okEvents)
        expect(yield* calledIds).toEqual([`a/fail-${reason}`, "b/ok"])
      }
    })
  )

  it.scoped("does not fall back on a non-retryable failure", () =>
    Effect.gen(function* () {
      yield* takeCalls
      for (const { code, reason, status } of fatal) {
        const error = yield* Effect.flip(Effect.scoped(start(`fallback-${reason}`)))
        expect(error).toMatchObject({ _tag: "GatewayError", status, code })
        expect(yield* calledIds).toEqual([`a/fail-${reason}`])
      }
    })
  )

  it.scoped("fails with the last target's failure when every target fails", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const error = yield* Effect.flip(start("allfail"))
      expect(error).toMatchObject({ _tag: "GatewayError", status: 503, code: "provider_unavailable" })
      expect(yield* calledIds).toEqual(["a/fail-overloaded", "b/fail-unavailable"])
    })
  )

  it.scoped("does not fall back once an event was produced: the events stream fails instead", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const run = yield* start("midway")
      expect(run.target.id).toBe("a/midway")
      const results = Chunk.toReadonlyArray(yield* Stream.runCollect(Stream.either(Stream.repeatEffectChunkOption(run.pull))))
      expect(results).toEqual([Either.right(ModelEvent.text("partial")), Either.left(expect.objectContaining({ _tag: "GatewayError", status: 502, code: "upstream_error" }))])
      expect(yield* calledIds).toEqual(["a/midway"])
    })
  )

  it.scoped("a defect in a target is not a retryable failure: no fallback, the run dies", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const exit = yield* Effect.exit(start("defect"))
      expect(Exit.isFailure(exit) && Exit.causeOption(exit).pipe(Option.map((c) => String(c)), Option.getOrElse(() => ""))).toContain("no script for a/unscripted")
      expect(exit._tag === "Failure" && exit.cause._tag).toBe("Die")
      expect(yield* calledIds).toEqual(["a/unscripted"])
    })
  )

  it.scoped("an unknown model fails 404 without taking a slot or calling a provider", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const error = yield* Effect.flip(start("nope/model"))
      expect(error).toMatchObject({ status: 404, code: "model_not_found" })
      expect(yield* inFlight).toBe(0)
      expect(yield* calledIds).toEqual([])
    })
  )

  it.scoped("holds a concurrency slot for the scope's lifetime (concurrency 1)", () =>
    Effect.gen(function* () {
      yield* takeCalls
      // sequential scoped runs: each releases its slot when its scope closes
      yield* Effect.scoped(start("b/ok"))
      expect(yield* inFlight).toBe(0)
      yield* Effect.scoped(start("b/ok"))
      expect(yield* inFlight).toBe(0)
      // overlapping runs: the second is refused while the first scope is open
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* start("b/ok")
          expect(yield* inFlight).toBe(1)
          const error = yield* Effect.flip(Effect.scoped(start("b/ok")))
          expect(error).toMatchObject({ _tag: "GatewayError", status: 429, code: "too_many_requests", retryAfter: 1 })
          expect(yield* inFlight).toBe(1)
        })
      )
      expect(yield* inFlight).toBe(0)
      // a failed run releases its slot too
      yield* Effect.flip(Effect.scoped(start("allfail")))
      expect(yield* inFlight).toBe(0)
      yield* Effect.scoped(start("b/ok"))
      expect(yield* calledIds).toEqual(["b/ok", "b/ok", "b/ok", "a/fail-overloaded", "b/fail-unavailable", "b/ok"])
    })
  )

  it.scoped("drops the sampling params the provider or model rejects and reports their wire names", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const sampled: CanonicalRequest = { ...request, sampling: { temperature: 0.2, topP: 0.9, topK: 4 } }
      const run = yield* Effect.scoped(start("a/picky", { request: sampled }))
      expect(run.droppedParams).toEqual(["temperature", "top_p"])
      const [call] = yield* takeCalls
      expect(call.request.sampling).toEqual({ topK: 4 })
      const plain = yield* Effect.scoped(start("b/ok", { request: sampled }))
      expect(plain.droppedParams).toEqual([])
      const [untouched] = yield* takeCalls
      expect(untouched.request).toBe(sampled)
    })
  )

  it.scoped("fails 504 timeout when the first event does not come before the deadline (TestClock)", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const fiber = yield* Effect.fork(start("slow/slow"))
      // the deadline timer and the double's 10 s sleep
      yield* awaitSleeps(2)
      yield* TestClock.adjust("500 millis")
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* TestClock.adjust("500 millis")
      const exit = yield* Fiber.await(fiber)
      expect(exit).toEqual(Exit.fail(expect.objectContaining({ _tag: "GatewayError", status: 504, code: "timeout" })))
      expect(yield* calledIds).toEqual(["slow/slow"])
    })
  )

  it.scoped("the deadline also bounds the events after the first one (TestClock)", () =>
    Effect.gen(function* () {
      const run = yield* start("slow/slow-after-first")
      const fiber = yield* Effect.fork(Stream.runCollect(Stream.either(Stream.repeatEffectChunkOption(run.pull))))
      yield* awaitSleeps(2)
      yield* TestClock.adjust("1 second")
      const results = Chunk.toReadonlyArray(yield* Fiber.join(fiber))
      expect(results).toEqual([Either.right(ModelEvent.text("first")), Either.left(expect.objectContaining({ status: 504, code: "timeout" }))])
    })
  )

  it.scoped("a deadline already past fails 504 before any provider call", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const error = yield* Effect.flip(start("b/ok", { deadline: Date.now() - 1 }))
      expect(error).toMatchObject({ status: 504, code: "timeout" })
      expect(yield* calledIds).toEqual([])
    })
  )
})

layer(runnerLayer(config, scriptedProviders(script)))("ModelRunner.complete", (it) => {
  it.effect("answers with every event of the target", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const run = yield* complete("b/ok")
      expect(run.target.id).toBe("b/ok")
      expect(run.events).toEqual(okEvents)
      expect(yield* calledIds).toEqual(["b/ok"])
      expect(yield* inFlight).toBe(0)
    })
  )

  it.effect("falls back on retryable failures, not on others, and releases its slot either way", () =>
    Effect.gen(function* () {
      yield* takeCalls
      for (const reason of retryable) {
        expect((yield* complete(`fallback-${reason}`)).target.id).toBe("b/ok")
        expect(yield* calledIds).toEqual([`a/fail-${reason}`, "b/ok"])
      }
      for (const { code, reason, status } of fatal) {
        expect(yield* Effect.flip(complete(`fallback-${reason}`))).toMatchObject({ status, code })
        expect(yield* calledIds).toEqual([`a/fail-${reason}`])
      }
      expect(yield* Effect.flip(complete("allfail"))).toMatchObject({ status: 503, code: "provider_unavailable" })
      expect(yield* inFlight).toBe(0)
    })
  )

  it.effect("falls back even after the first target produced events: nothing has reached the caller yet", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const run = yield* complete("midway")
      expect(run.target.id).toBe("b/ok")
      expect(yield* calledIds).toEqual(["a/midway", "b/ok"])
    })
  )

  it.scoped("shares the concurrency cap with start", () =>
    Effect.gen(function* () {
      yield* start("b/ok")
      expect(yield* Effect.flip(complete("b/ok"))).toMatchObject({ status: 429, code: "too_many_requests" })
    })
  )

  it.effect("drops unsupported params as start does", () =>
    Effect.gen(function* () {
      yield* takeCalls
      const run = yield* complete("a/picky", { request: { ...request, sampling: { temperature: 0.2, seed: 1 } } })
      expect(run.droppedParams).toEqual(["temperature", "seed"])
      const [call] = yield* takeCalls
      expect(call.request.sampling).toEqual({})
    })
  )

  it.effect("fails 504 timeout at the deadline (TestClock)", () =>
    Effect.gen(function* () {
      const fiber = yield* Effect.fork(complete("slow/slow"))
      yield* awaitSleeps(2)
      yield* TestClock.adjust("500 millis")
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      yield* TestClock.adjust("500 millis")
      expect(yield* Fiber.await(fiber)).toEqual(Exit.fail(expect.objectContaining({ status: 504, code: "timeout" })))
      expect(yield* inFlight).toBe(0)
    })
  )
})

describe("dropUnsupported", () => {
  const sampled: CanonicalRequest = { ...request, sampling: { temperature: 1, topP: 0.5, topK: 3, seed: 7, presencePenalty: 0, frequencyPenalty: 0.1, stop: ["x"] } }

  it("drops each listed param that is set, by wire name, keeping the rest", () => {
    const { dropped, request: out } = dropUnsupported(sampled, ["top_k", "seed", "presence_penalty", "logit_bias"], true)
    expect(dropped).toEqual(["top_k", "seed", "presence_penalty"])
    expect(out.sampling).toEqual({ temperature: 1, topP: 0.5, frequencyPenalty: 0.1, stop: ["x"] })
    expect(sampled.sampling.topK).toBe(3)
  })

  it("reports nothing for params the request did not set, and leaves the request as it was", () => {
    const bare = { ...request, sampling: { temperature: 1 } }
    const result = dropUnsupported(bare, ["top_p", "seed"], true)
    expect(result).toEqual({ request: bare, dropped: [] })
    expect(result.request).toBe(bare)
  })

  it("does nothing when disabled", () => {
    const result = dropUnsupported(sampled, ["temperature"], false)
    expect(result.dropped).toEqual([])
    expect(result.request).toBe(sampled)
  })
})
