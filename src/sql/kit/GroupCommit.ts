import { Deferred, Effect, Either, Exit, Fiber, FiberSet, type Scope } from "effect"
import { yieldToEventLoop } from "./StoredForm.js"

/**
 * One writer for many callers (group commit): `submit` queues an item and waits; a single fiber
 * takes everything queued and hands it to `run` at once, so items that finish together share one
 * commit (and its fsync). Batching is natural, without a timer: while a batch runs, new items
 * queue up for the next one, which starts as soon as it ends; an item submitted to an idle writer
 * waits only for the current turn of the event loop to end (items completing in that turn join
 * it), never for a clock. A batch's work has two parts: the first (the commit) runs one batch at
 * a time; the second (waiting for the commit to be durable) runs while the writer goes on with the
 * next batch, so that a slow fsync does not hold the next commit back.
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
  /**
   * one batch, in submission order: its first part (run one batch at a time) answers its second
   * part (run alongside the next batches), which answers an outcome per item; a failure (or
   * defect) of either part is the outcome of every item of the batch
   */
  readonly run: (batch: ReadonlyArray<A>) => Effect.Effect<Effect.Effect<ReadonlyArray<Either.Either<B, E>>, E>, E>
  /** an item's share of `maxWeight` */
  readonly weight: (item: A) => number
  /** a batch holds items up to this weight together (always at least one item) */
  readonly maxWeight: number
  /** the outcome of items still queued when the scope closes, or submitted after */
  readonly closed: () => E
}): Effect.Effect<GroupCommit<A, B, E>, never, Scope.Scope> =>
  Effect.gen(function* () {
    // second parts still running; the scope waits for them when it closes (they are uninterruptible)
    const completing = yield* FiberSet.make<void>()
    let queued: Array<Entry<A, B, E>> = []
    let open = true
    let wake: (() => void) | undefined

    /** true when the writer was idle and had to wait for an item; false when items queued while it worked */
    const work = Effect.async<boolean>((resume) => {
      if (queued.length > 0) return resume(Effect.succeed(false))
      wake = () => {
        wake = undefined
        resume(Effect.succeed(true))
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

    // Taking the queue and settling every entry taken is uninterruptible: an entry is either
    // still queued (failed by the finalizer below) or on its way to be settled, never lost.
    const takeAndRun = Effect.uninterruptible(
      Effect.gen(function* () {
        const taken = queued
        queued = []
        const batches = batchesOf(taken)
        for (let i = 0; i < batches.length; i++) {
          if (i > 0) yield* yieldToEventLoop
          const batch = batches[i]
          const first = yield* Effect.exit(Effect.suspend(() => options.run(batch.map((entry) => entry.item))))
          if (Exit.isFailure(first)) yield* settle(batch, Exit.failCause(first.cause))
          else yield* FiberSet.run(completing, Effect.uninterruptible(Effect.flatMap(Effect.exit(first.value), (exit) => settle(batch, exit))))
        }
      })
    )

    // woken from idle, let the items completing in this turn of the event loop join; items that
    // queued while a batch ran have waited already and go at once
    const next = Effect.flatMap(work, (idle) => (idle ? yieldToEventLoop : Effect.void))
    const writer = yield* Effect.forkScoped(Effect.forever(Effect.zipRight(next, takeAndRun)))
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
