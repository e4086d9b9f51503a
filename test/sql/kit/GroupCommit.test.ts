import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Either, Exit, Fiber, Option, Scope } from "effect"
import * as GroupCommit from "../../../src/sql/kit/GroupCommit.js"

type Outcomes = ReadonlyArray<Either.Either<number, string>>
type Run = (batch: ReadonlyArray<number>) => Effect.Effect<Effect.Effect<Outcomes, string>, string>

/** A writer whose batches are recorded; `run` answers each item doubled unless told otherwise. */
const recording = (options: { readonly run?: Run; readonly maxWeight?: number } = {}) =>
  Effect.gen(function* () {
    const batches: Array<ReadonlyArray<number>> = []
    const writer = yield* GroupCommit.make<number, number, string>({
      run: (batch) => {
        batches.push(batch)
        return options.run?.(batch) ?? Effect.succeed(Effect.succeed(batch.map((n) => Either.right(n * 2))))
      },
      weight: (n) => n,
      maxWeight: options.maxWeight ?? 1000,
      closed: () => "closed"
    })
    return { writer, batches }
  })

describe("GroupCommit", () => {
  it.scoped("items submitted together run as one batch, in order; one alone runs at once, with no clock involved", () =>
    Effect.gen(function* () {
      const { writer, batches } = yield* recording()
      // TestClock never moves here: a writer waiting for a timer would hang
      expect(yield* writer.submit(7)).toBe(14)
      expect(batches).toEqual([[7]])
      const items = Array.from({ length: 20 }, (_, i) => i + 1)
      expect(yield* Effect.forEach(items, (n) => writer.submit(n), { concurrency: "unbounded" })).toEqual(items.map((n) => n * 2))
      expect(batches.slice(1)).toEqual([items])
    }))

  it.scoped("a batch is cut at maxWeight (an item heavier than that runs alone)", () =>
    Effect.gen(function* () {
      const { writer, batches } = yield* recording({ maxWeight: 10 })
      const items = [4, 4, 4, 30, 1, 9]
      expect(yield* Effect.forEach(items, (n) => writer.submit(n), { concurrency: "unbounded" })).toEqual(items.map((n) => n * 2))
      expect(batches).toEqual([[4, 4], [4], [30], [1, 9]])
    }))

  it.scoped("each item gets its own outcome; a failed or dead batch, in either part, fails every item of it; the writer goes on", () =>
    Effect.gen(function* () {
      let mode: "outcomes" | "fail first" | "fail second" | "die first" | "die second" = "outcomes"
      const { writer } = yield* recording({
        run: (batch) => {
          if (mode === "fail first") return Effect.fail("batch failed")
          if (mode === "die first") return Effect.die(new Error("boom"))
          if (mode === "fail second") return Effect.succeed(Effect.fail("batch failed"))
          if (mode === "die second") return Effect.succeed(Effect.die(new Error("boom")))
          return Effect.succeed(Effect.succeed(batch.map((n) => (n % 2 === 0 ? Either.right(n) : Either.left(`odd ${n}`)))))
        }
      })
      const all = (items: ReadonlyArray<number>) => Effect.forEach(items, (n) => Effect.exit(writer.submit(n)), { concurrency: "unbounded" })
      expect(yield* all([1, 2, 3])).toEqual([Exit.fail("odd 1"), Exit.succeed(2), Exit.fail("odd 3")])
      for (const failing of ["fail first", "fail second"] as const) {
        mode = failing
        expect(yield* all([4, 5])).toEqual([Exit.fail("batch failed"), Exit.fail("batch failed")])
      }
      for (const dying of ["die first", "die second"] as const) {
        mode = dying
        const dead = yield* all([6, 7])
        expect(dead.map((exit) => Exit.isFailure(exit) && Cause.isDie(exit.cause))).toEqual([true, true])
      }
      mode = "outcomes"
      expect(yield* writer.submit(8)).toBe(8)
    }))

  it.scoped("the next batch's first part runs while a batch's second part still waits", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const { writer, batches } = yield* recording({
        run: (batch) => Effect.succeed(Effect.as(batch[0] === 1 ? Deferred.await(gate) : Effect.void, batch.map((n) => Either.right(n))))
      })
      const held = yield* Effect.fork(writer.submit(1))
      while (batches.length === 0) yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      // the first batch's second part is held at the gate; a later item is committed and answered
      expect(yield* writer.submit(2)).toBe(2)
      expect(batches).toEqual([[1], [2]])
      expect(yield* Fiber.poll(held)).toEqual(Option.none())
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(held)).toBe(1)
    }))

  it.effect("closing the scope lets the running batch finish (both parts), fails what is still queued and what comes after", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const second = yield* Deferred.make<void>()
      const { writer, batches } = yield* recording({
        run: (batch) =>
          Effect.zipRight(
            Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate)),
            Effect.succeed(Effect.as(Deferred.await(second), batch.map((n) => Either.right(n))))
          )
      }).pipe(Scope.extend(scope))
      const running = yield* Effect.fork(writer.submit(1))
      yield* Deferred.await(started)
      const queued = yield* Effect.fork(writer.submit(2))
      yield* Effect.yieldNow()
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      yield* Effect.yieldNow()
      // the scope waits for the running batch's second part too
      expect(yield* Fiber.poll(closing)).toEqual(Option.none())
      yield* Deferred.succeed(second, undefined)
      yield* Fiber.join(closing)
      expect(yield* Fiber.join(running)).toBe(1)
      expect(yield* Effect.flip(Fiber.join(queued))).toBe("closed")
      expect(yield* Effect.flip(writer.submit(3))).toBe("closed")
      expect(batches).toEqual([[1]])
    }))
})
