import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Either, Exit, Fiber, Scope } from "effect"
import * as GroupCommit from "../../src/services/GroupCommit.js"

/** A writer whose batches are recorded; `run` answers each item doubled unless told otherwise. */
const recording = (options: { readonly run?: (batch: ReadonlyArray<number>) => Effect.Effect<ReadonlyArray<Either.Either<number, string>>, string>; readonly maxWeight?: number } = {}) =>
  Effect.gen(function* () {
    const batches: Array<ReadonlyArray<number>> = []
    const writer = yield* GroupCommit.make<number, number, string>({
      run: (batch) => {
        batches.push(batch)
        return options.run?.(batch) ?? Effect.succeed(batch.map((n) => Either.right(n * 2)))
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

  it.scoped("each item gets its own outcome; a failed or dead batch fails every item of it; the writer goes on", () =>
    Effect.gen(function* () {
      let mode: "outcomes" | "fail" | "die" = "outcomes"
      const { writer } = yield* recording({
        run: (batch) => {
          if (mode === "fail") return Effect.fail("batch failed")
          if (mode === "die") return Effect.die(new Error("boom"))
          return Effect.succeed(batch.map((n) => (n % 2 === 0 ? Either.right(n) : Either.left(`odd ${n}`))))
        }
      })
      const all = (items: ReadonlyArray<number>) => Effect.forEach(items, (n) => Effect.exit(writer.submit(n)), { concurrency: "unbounded" })
      expect(yield* all([1, 2, 3])).toEqual([Exit.fail("odd 1"), Exit.succeed(2), Exit.fail("odd 3")])
      mode = "fail"
      expect(yield* all([4, 5])).toEqual([Exit.fail("batch failed"), Exit.fail("batch failed")])
      mode = "die"
      const dead = yield* all([6, 7])
      expect(dead.map((exit) => Exit.isFailure(exit) && Cause.isDie(exit.cause))).toEqual([true, true])
      mode = "outcomes"
      expect(yield* writer.submit(8)).toBe(8)
    }))

  it.effect("closing the scope lets the running batch finish, fails what is still queued and what comes after", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const { writer, batches } = yield* recording({
        run: (batch) => Effect.zipRight(Effect.zipRight(Deferred.succeed(started, undefined), Deferred.await(gate)), Effect.succeed(batch.map((n) => Either.right(n))))
      }).pipe(Scope.extend(scope))
      const running = yield* Effect.fork(writer.submit(1))
      yield* Deferred.await(started)
      const queued = yield* Effect.fork(writer.submit(2))
      yield* Effect.yieldNow()
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(closing)
      expect(yield* Fiber.join(running)).toBe(1)
      expect(yield* Effect.flip(Fiber.join(queued))).toBe("closed")
      expect(yield* Effect.flip(writer.submit(3))).toBe("closed")
      expect(batches).toEqual([[1]])
    }))
})
