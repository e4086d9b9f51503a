import { Clock, Context, Effect, Layer, Option } from "effect"

type Item = Readonly<Record<string, unknown>>

/** Caps of the memory; tests pass smaller ones. */
export interface ItemMemoryLimits {
  /** answers kept per app */
  readonly maxAnswers: number
  /** how long an answer is kept, in ms */
  readonly ttlMs: number
}

export const defaultItemMemoryLimits: ItemMemoryLimits = { maxAnswers: 1000, ttlMs: 60 * 60 * 1000 }

interface Answer {
  readonly responseId: string
  readonly expiresAt: number
  readonly items: ReadonlyMap<string, Item>
}

/** One app's answers in the order they were remembered (oldest first), and every item id to its answer. */
interface AppMemory {
  readonly answers: Map<string, Answer>
  readonly items: Map<string, Answer>
}

/**
 * Output items the gateway returned, for `item_reference` input items (spec 4.1): per app the last
 * 1000 answers, each for one hour, in this process only and apart from stored responses.
 */
export class ItemMemory extends Context.Tag("gateway/ItemMemory")<
  ItemMemory,
  {
    /** remember the output items of one answer (each has an `id`) */
    readonly remember: (app: string, responseId: string, items: ReadonlyArray<Item>) => Effect.Effect<void>
    /** an item by id, held for this app */
    readonly lookup: (app: string, itemId: string) => Effect.Effect<Option.Option<Item>>
    /** forget the items of one answer (its stored response was deleted) */
    readonly forget: (app: string, responseId: string) => Effect.Effect<void>
  }
>() {
  static readonly make = (limits: Partial<ItemMemoryLimits> = {}) =>
    Effect.sync(() => {
      const { maxAnswers, ttlMs } = { ...defaultItemMemoryLimits, ...limits }
      const apps = new Map<string, AppMemory>()

      const drop = (memory: AppMemory, answer: Answer) => {
        memory.answers.delete(answer.responseId)
        // a later answer may have reused an item id: only unlink items that still point here
        for (const id of answer.items.keys()) if (memory.items.get(id) === answer) memory.items.delete(id)
      }
      const tidy = (app: string, memory: AppMemory, now: number) => {
        // oldest first; answers are remembered in clock order, so stop at the first live one
        for (const answer of memory.answers.values()) {
          if (memory.answers.size <= maxAnswers && answer.expiresAt > now) break
          drop(memory, answer)
        }
        if (memory.answers.size === 0) apps.delete(app)
      }

      return ItemMemory.of({
        remember: (app, responseId, items) =>
          Effect.map(Clock.currentTimeMillis, (now) => {
            const memory = apps.get(app) ?? { answers: new Map(), items: new Map() }
            apps.set(app, memory)
            const previous = memory.answers.get(responseId)
            if (previous !== undefined) drop(memory, previous)
            const byId = new Map<string, Item>()
            for (const item of items) if (typeof item.id === "string") byId.set(item.id, item)
            const answer: Answer = { responseId, expiresAt: now + ttlMs, items: byId }
            memory.answers.set(responseId, answer)
            for (const id of byId.keys()) memory.items.set(id, answer)
            tidy(app, memory, now)
          }),
        lookup: (app, itemId) =>
          Effect.map(Clock.currentTimeMillis, (now) => {
            const memory = apps.get(app)
            const answer = memory?.items.get(itemId)
            if (memory === undefined || answer === undefined) return Option.none()
            if (answer.expiresAt <= now) {
              drop(memory, answer)
              tidy(app, memory, now)
              return Option.none()
            }
            return Option.fromNullable(answer.items.get(itemId))
          }),
        forget: (app, responseId) =>
          Effect.sync(() => {
            const memory = apps.get(app)
            const answer = memory?.answers.get(responseId)
            if (memory === undefined || answer === undefined) return
            drop(memory, answer)
            if (memory.answers.size === 0) apps.delete(app)
          })
      })
    })

  static readonly layer = (limits: Partial<ItemMemoryLimits> = {}) => Layer.effect(ItemMemory, ItemMemory.make(limits))
}
