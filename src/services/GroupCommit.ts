import { Deferred, Effect, Either, Exit, Fiber, type Scope } from "effect"
import { yieldToEventLoop } from "./StoredForm.js"

/**
 * One writer for many callers (group commit): `submit` queues an item and waits; a single fiber
 * takes everything queued and hands it to `run` at once, so items that finish together share one
 * commit (and its fsync). Batching is natural, without a timer: while a batch runs, new items
 * queue up for the next one; an item submitted to an idle writer waits only for the current turn
 * of the event loop to end (items completing in that turn join it), never for a clock.
 */
export interface GroupCommit<A, B, E> {
  /** queue `item` for the next batch and wait for its outcome */
  readonly submit: (item: A) => Effect.Effect<B, E>
}

interface Entry<A, B, E> {
  readonly item: A
  readonly deferred: Deferred.Deferred<B, E>
}

export const make = <A, B, E>(options: {
  /** one batch, in submission order; an outcome per item, or a failure (or defect) of the whole batch */
  readonly run: (batch: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<Either.Either<B, E>>, E>
  /** an item's share of `maxWeight` */
  readonly weight: (item: A) => number
  /** a batch holds items up to this weight together (always at least one item) */
  readonly maxWeight: number
  /** the outcome of items still queued when the scope closes, or submitted after */
  readonly closed: () => E
}): Effect.Effect<GroupCommit<A, B, E>, never, Scope.Scope> =>
  Effect.gen(function* () {
    let queued: Array<Entry<A, B, E>> = []
    let open = true
    let wake: (() => void) | undefined

    const work = Effect.async<void>((resume) => {
      if (queued.length > 0) return resume(Effect.void)
      wake = () => {
        wake = undefined
        resume(Effect.void)
      }
      return Effect.sync(() => void (wake = undefined))
    })

    const settle = (batch: ReadonlyArray<Entry<A, B, E>>, exit: Exit.Exit<ReadonlyArray<Either.Either<B, E>>, E>) =>
      Effect.forEach(
        batch,
        (entry, i) => {
          if (Exit.isFailure(exit)) return Deferred.failCause(entry.deferred, exit.cause)
          const outcome = exit.value[i]
          if (outcome === undefined) return Deferred.die(entry.deferred, new Error("GroupCommit: run gave fewer outcomes than items"))
          return Deferred.done(entry.deferred, Either.isRight(outcome) ? Exit.succeed(outcome.right) : Exit.fail(outcome.left))
        },
        { discard: true }
      )

    /** `entries` cut into batches of at most `maxWeight` */
    const batchesOf = (entries: ReadonlyArray<Entry<A, B, E>>) => {
      const batches: Array<Array<Entry<A, B, E>>> = []
      let weight = Number.POSITIVE_INFINITY
      for (const entry of entries) {
        const w = options.weight(entry.item)
        if (weight + w > options.maxWeight) {
          batches.push([])
          weight = 0
        }
        batches[batches.length - 1].push(entry)
        weight += w
      }
      return batches
    }

    // Taking the queue and settling every entry taken is one uninterruptible step: an entry is
    // either still queued (failed by the finalizer below) or settled, never lost.
    const takeAndRun = Effect.uninterruptible(
      Effect.gen(function* () {
        const taken = queued
        queued = []
        const batches = batchesOf(taken)
        for (let i = 0; i < batches.length; i++) {
          if (i > 0) yield* yieldToEventLoop
          const batch = batches[i]
          const exit = yield* Effect.exit(Effect.suspend(() => options.run(batch.map((entry) => entry.item))))
          yield* settle(batch, exit)
        }
      })
    )

    const writer = yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.zipRight(work, yieldToEventLoop), takeAndRun)))
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        open = false
        yield* Fiber.interrupt(writer)
        const left = queued
        queued = []
        yield* Effect.forEach(left, (entry) => Deferred.fail(entry.deferred, options.closed()), { discard: true })
      })
    )

    return {
      submit: (item: A) =>
        Effect.flatMap(Deferred.make<B, E>(), (deferred) =>
          Effect.suspend(() => {
            if (!open) return Effect.fail(options.closed())
            queued.push({ item, deferred })
            wake?.()
            return Deferred.await(deferred)
          })
        )
    }
  })
