import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Fiber, Option, Stream, TestClock } from "effect"
import { ModelEvent } from "../../src/domain/Canonical.js"
import { UpstreamError } from "../../src/domain/Errors.js"
import { drainSource, streamSource, wholeSource, type ProviderCall } from "../../src/providers/Provider.js"

/** The one provider contract (src/providers/Provider.ts): a call's answer is one source of events. */

const call = (deadline: number): ProviderCall => ({
  target: { provider: "p", providerType: "mock", model: "m", id: "p/m" },
  request: { system: [], messages: [], tools: [], toolChoice: { type: "auto" }, sampling: {}, parallelToolCalls: true, stream: true },
  deadline
})

const events = [ModelEvent.text("a"), ModelEvent.text("b"), ModelEvent.finish("stop")]

describe("wholeSource", () => {
  it.effect("a non-streamed answer is its events in one chunk, then the end; the call runs on the first pull only", () =>
    Effect.gen(function* () {
      let calls = 0
      const source = wholeSource(Effect.sync(() => (calls++, events)))
      expect(calls).toBe(0)
      const first = yield* source.pull
      expect(Chunk.toReadonlyArray(first)).toEqual(events)
      const end = yield* Effect.either(source.pull)
      expect(Either.isLeft(end) && Option.isNone(end.left)).toBe(true)
      expect(calls).toBe(1)
    })
  )

  it.effect("its failure is the pull's", () =>
    Effect.gen(function* () {
      const failure = new UpstreamError({ reason: "server_error", provider: "p", message: "boom" })
      const result = yield* Effect.either(drainSource(wholeSource(Effect.fail(failure))))
      expect(result).toEqual(Either.left(failure))
    })
  )
})

describe("streamSource", () => {
  it.effect("reads the stream's events and ends", () =>
    Effect.gen(function* () {
      const read = yield* drainSource(streamSource(Stream.fromIterable(events), call(Date.now() + 60_000)))
      expect(read).toEqual(events)
    })
  )

  it.effect("fails timeout at the call's deadline, after the events that came before it", () =>
    Effect.gen(function* () {
      const slow = Stream.concat(Stream.make(ModelEvent.text("early")), Stream.fromEffect(Effect.as(Effect.sleep("1 hour"), ModelEvent.text("late"))))
      const source = streamSource(slow, call(Date.now() + 5_000))
      const first = yield* source.pull
      expect(Chunk.toReadonlyArray(first)).toEqual([ModelEvent.text("early")])
      const next = yield* Effect.fork(Effect.either(source.pull))
      yield* TestClock.adjust("6 seconds")
      const result = yield* Fiber.join(next)
      expect(Either.isLeft(result) && Option.isSome(result.left) ? result.left.value.reason : "none").toBe("timeout")
      yield* source.close
    })
  )

  it.effect("close ends the stream: its finalizer runs, whether or not it was read to its end", () =>
    Effect.gen(function* () {
      let finalized = 0
      const stream = Stream.fromIterable(events).pipe(Stream.ensuring(Effect.sync(() => finalized++)))
      const source = streamSource(stream, call(Date.now() + 60_000))
      yield* source.pull
      yield* source.close
      yield* source.close
      expect(finalized).toBe(1)
    })
  )
})
