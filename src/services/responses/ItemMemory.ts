import * as SqlClient from "@effect/sql/SqlClient"
import * as SqlSchema from "@effect/sql/SqlSchema"
import { SqlError } from "@effect/sql/SqlError"
import { Cause, Clock, Context, Effect, Either, Layer, Option, Schema, type Scope } from "effect"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { Backend } from "../../sql/Database.js"
import { Log } from "../ops/Log.js"
import * as GroupCommit from "../../sql/kit/GroupCommit.js"
import { throttledSweep } from "../../sql/kit/StoreKit.js"

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

/** The service: the same on both backends. */
export interface ItemMemoryService {
  /** remember the output items of one answer (each has an `id`); never fails (the answer it follows must not) */
  readonly remember: (app: string, responseId: string, items: ReadonlyArray<Item>) => Effect.Effect<void>
  /** an item by id, held for this app; a database failure is a 503 */
  readonly lookup: (app: string, itemId: string) => Effect.Effect<Option.Option<Item>, GatewayError>
  /** forget the items of one answer (its stored response was deleted); never fails */
  readonly forget: (app: string, responseId: string) => Effect.Effect<void>
}

/**
 * Output items the gateway returned, for `item_reference` input items (spec 4.1): per app the last
 * 1000 answers, each for one hour, apart from stored responses. On SQLite (one gateway process) in
 * this process's memory; on PostgreSQL in the table `held_items`, so that an item returned by one
 * replica can be referenced on any other.
 */
export class ItemMemory extends Context.Tag("gateway/ItemMemory")<ItemMemory, ItemMemoryService>() {
  /** The memory for the database's backend. */
  static readonly make = (limits: Partial<ItemMemoryLimits> = {}): Effect.Effect<ItemMemoryService, never, Backend | SqlClient.SqlClient | Log | Scope.Scope> =>
    Effect.flatMap(Backend, (backend) => (backend.kind === "postgres" ? ItemMemory.makeShared(limits) : ItemMemory.makeInMemory(limits)))

  /** In this process's memory. */
  static readonly makeInMemory = (limits: Partial<ItemMemoryLimits> = {}): Effect.Effect<ItemMemoryService> =>
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

      return {
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
      }
    })

  /** In the database's `held_items`, shared by every replica on it. */
  static readonly makeShared = (limits: Partial<ItemMemoryLimits> = {}) => makeShared({ ...defaultItemMemoryLimits, ...limits })

  /** The memory of the database's backend (`make`); its sweeps stop with the scope. */
  static readonly layer = (limits: Partial<ItemMemoryLimits> = {}) => Layer.scoped(ItemMemory, ItemMemory.make(limits))
}

const SWEEP_EVERY_MS = 60_000
/** one item of a remembered answer as sent to the database; `k` numbers the answers of one batch */
const HeldRow = Schema.Struct({
  k: Schema.Number,
  app: Schema.String,
  response_id: Schema.String,
  item_id: Schema.String,
  item: Schema.String,
  expires_at: Schema.Number
})
type HeldRow = typeof HeldRow.Type
const JsonItem = Schema.parseJson(Schema.Record({ key: Schema.String, value: Schema.Unknown }))

/**
 * The memory on PostgreSQL. The answers remembered together (group commit) are one statement:
 * their items, each with its answer's number from the sequence `held_answers` (larger is later,
 * whichever replica remembered it). A lookup honors both limits itself: the item's answer
 * unexpired and among the app's `maxAnswers` largest numbers; so remembering never has to count,
 * and a sweep (at most once a minute per replica) deletes what no lookup can see any more. An
 * answer without items leaves no row, so it does not count among the last answers (nothing of it
 * could be referenced anyway).
 */
const makeShared = ({ maxAnswers, ttlMs }: ItemMemoryLimits): Effect.Effect<ItemMemoryService, never, SqlClient.SqlClient | Log | Scope.Scope> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* Log
    const scope = yield* Effect.scope

    /**
     * The answers of a batch, in one statement: `k` numbers the answers of the batch (in the order
     * they were remembered), each gets its number from `held_answers`. An answer remembered again
     * replaces its items (and becomes the latest).
     */
    const insert = SqlSchema.void({
      Request: Schema.Array(HeldRow),
      execute: (rows) => sql`WITH given AS (
          SELECT * FROM json_to_recordset(${JSON.stringify(rows)}::json) AS v(k int, app text, response_id text, item_id text, item text, expires_at bigint)
        ), gone AS (
          DELETE FROM held_items h USING (SELECT DISTINCT app, response_id FROM given) d WHERE h.app = d.app AND h.response_id = d.response_id
        ), answers AS (
          SELECT k, nextval('held_answers') AS n FROM (SELECT DISTINCT k FROM given ORDER BY k) ks
        )
        INSERT INTO held_items (answer, app, response_id, item_id, item, expires_at)
        SELECT answers.n, given.app, given.response_id, given.item_id, given.item, given.expires_at FROM given JOIN answers USING (k)`
    })
    const find = SqlSchema.findOne({
      Request: Schema.Struct({ app: Schema.String, itemId: Schema.String, now: Schema.Number }),
      Result: Schema.Struct({ item: JsonItem }),
      execute: ({ app, itemId, now }) => sql`SELECT item FROM held_items
        WHERE app = ${app} AND item_id = ${itemId} AND expires_at > ${now}
        AND answer > COALESCE((SELECT answer FROM (SELECT DISTINCT answer FROM held_items WHERE app = ${app}) a ORDER BY answer DESC OFFSET ${maxAnswers} LIMIT 1), 0)
        ORDER BY answer DESC LIMIT 1`
    })
    const remove = SqlSchema.void({
      Request: Schema.Struct({ app: Schema.String, responseId: Schema.String }),
      execute: ({ app, responseId }) => sql`DELETE FROM held_items WHERE app = ${app} AND response_id = ${responseId}`
    })
    const deleteExpired = SqlSchema.void({
      Request: Schema.Number,
      execute: (now) => sql`DELETE FROM held_items WHERE expires_at <= ${now}`
    })
    const deleteBeyondLast = SqlSchema.void({
      Request: Schema.Void,
      execute: () => sql`DELETE FROM held_items h USING (
          SELECT app, answer FROM (SELECT app, answer, DENSE_RANK() OVER (PARTITION BY app ORDER BY answer DESC) AS r FROM held_items) ranked WHERE r = ${maxAnswers + 1}
        ) cut WHERE h.app = cut.app AND h.answer <= cut.answer`
    })

    const sweep = Effect.zipRight(Effect.flatMap(Clock.currentTimeMillis, deleteExpired), deleteBeyondLast())
    const sweeper = throttledSweep({ sweep, everyMs: SWEEP_EVERY_MS, scope, log, event: "responses.items_sweep_failed" })
    const logged = (event: string, fields: Record<string, unknown>) => (cause: Cause.Cause<unknown>) =>
      Effect.sync(() => log.error(event, { ...fields, reason: Cause.isDie(cause) ? "defect" : "database" }))
    yield* sweeper.started
    // answers that finish together are remembered in one statement (one commit)
    const writer = yield* GroupCommit.make({
      run: (answers: ReadonlyArray<ReadonlyArray<HeldRow>>) =>
        Effect.map(
          insert(answers.flatMap((rows, k) => rows.map((row) => ({ ...row, k })))),
          () => Effect.succeed(answers.map(() => Either.right<void>(undefined)))
        ),
      weight: (rows) => rows.reduce((sum, row) => sum + 256 + row.item.length, 0),
      maxWeight: 1024 * 1024,
      closed: () => new SqlError({ cause: undefined, message: "ItemMemory closed" })
    })

    return {
      remember: (app, responseId, items) =>
        Effect.gen(function* () {
          yield* sweeper.maybe
          const now = yield* Clock.currentTimeMillis
          const expires_at = now + ttlMs
          const rows = items.flatMap((item) =>
            typeof item.id === "string" ? [{ k: 0, app, response_id: responseId, item_id: item.id, item: JSON.stringify(item), expires_at }] : []
          )
          if (rows.length > 0) yield* writer.submit(rows)
        }).pipe(Effect.catchAllCause(logged("responses.remember_failed", { app, id: responseId })), Effect.withSpan("ItemMemory.remember")),
      lookup: (app, itemId) =>
        Effect.gen(function* () {
          const now = yield* Clock.currentTimeMillis
          const found = yield* find({ app, itemId, now })
          return Option.map(found, (row): Item => row.item)
        }).pipe(
          Effect.catchAll(() =>
            Effect.suspend(() => {
              log.error("responses.lookup_failed", { app, reason: "database" })
              return Effect.fail(Errors.databaseUnavailable("Item references"))
            })
          ),
          Effect.withSpan("ItemMemory.lookup")
        ),
      forget: (app, responseId) =>
        remove({ app, responseId }).pipe(Effect.catchAllCause(logged("responses.forget_failed", { app, id: responseId })), Effect.withSpan("ItemMemory.forget"))
    }
  })
