import { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Option } from "effect"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import type { Log } from "../ops/Log.js"
import { serialize, StoreFailure } from "../../sql/kit/StoredForm.js"

/**
 * What both stored-response backends share: the record, the caps, the service's shape, and how a
 * save's failure is logged and a read's database failure answered.
 */

/** One stored response of the Responses-style API (spec 2.1). */
export interface StoredRecord {
  /** `resp_` + 32 hex */
  readonly id: string
  readonly app: string
  /** epoch ms */
  readonly createdAt: number
  /** the response object as first returned */
  readonly response: Readonly<Record<string, unknown>>
  /** every input item the model saw, each with an `id`, in order (history included) */
  readonly input: ReadonlyArray<Readonly<Record<string, unknown>>>
}

/** Caps of the store; tests pass smaller ones. */
export interface ResponseStoreLimits {
  /** records per app */
  readonly maxRecords: number
  /** stored bytes per app */
  readonly maxBytes: number
  /** stored form of one record; larger ones are not kept */
  readonly maxRecordBytes: number
  /** SQLite: stored form of one record kept in its database row; larger ones are files (PostgreSQL keeps every record in its row) */
  readonly maxInlineBytes: number
}

export const defaultResponseStoreLimits: ResponseStoreLimits = {
  maxRecords: 1000,
  maxBytes: 128 * 1024 * 1024,
  maxRecordBytes: 8 * 1024 * 1024,
  // Inline, a record costs no file, no fsync and no rename of its own: its bytes reach the disk
  // with its batch's one WAL fsync. But better-sqlite3 is synchronous: copying the body into the
  // WAL, and later into the database at a checkpoint, holds the event loop. Measured here (commit
  // without fsync, p50): 2 KiB 0.03 ms, 64 KiB 0.12 ms, 256 KiB 0.6 ms, 512 KiB 1.2 ms, and about
  // as much again later for the checkpoint. Up to 64 KiB (most answers, and chains of dozens of
  // turns) that is cheaper than a file; past it the record is a file written off the event loop.
  maxInlineBytes: 64 * 1024
}

/** The service: the same on both backends. */
export interface ResponseStoreService {
  /** store a finished response; never fails: returns what happened ("stored": it is durable) */
  readonly save: (record: StoredRecord, options: { readonly maxAgeDays: number }) => Effect.Effect<"stored" | "skipped" | "failed">
  /** a live record of this app, or none (unknown, deleted, expired, other app); a database failure is a 503 */
  readonly get: (app: string, id: string) => Effect.Effect<Option.Option<StoredRecord>, GatewayError>
  /** delete a record of this app; false when there was none; a database failure is a 503 */
  readonly remove: (app: string, id: string) => Effect.Effect<boolean, GatewayError>
  /** records and bytes held per app, by app name (for status pages) */
  readonly stats: () => Effect.Effect<ReadonlyArray<{ readonly app: string; readonly count: number; readonly bytes: number }>, GatewayError>
}

export const DAY_MS = 24 * 60 * 60 * 1000
/** ids become file names on SQLite: only these are accepted (on both backends, so they answer alike) */
export const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/

/** When a record saved now expires: `maxAgeDays` after its creation (30 days when the setting is unusable). */
export const expiryOf = (record: StoredRecord, maxAgeDays: number) => record.createdAt + (Number.isFinite(maxAgeDays) && maxAgeDays > 0 ? maxAgeDays : 30) * DAY_MS

/** A save never fails its answer: a failure is logged `responses.store_failed` with a reason code (never content). */
/**
 * A record's stored form, the same on both backends: none when it is over `maxRecordBytes` (not
 * kept, logged `responses.store_skipped`); fails `bad_id` for an id that cannot be stored.
 */
export const storedFormOf = (record: StoredRecord, maxRecordBytes: number, log: Log["Type"]) =>
  Effect.gen(function* () {
    if (!SAFE_ID.test(record.id)) return yield* new StoreFailure({ reason: "bad_id" })
    const form = yield* serialize(record, maxRecordBytes)
    if (form.bytes <= maxRecordBytes) return Option.some(form)
    log.info("responses.store_skipped", { app: record.app, id: record.id, bytes: form.bytes })
    return Option.none<typeof form>()
  })

/** A stored record that could not be read: logged, and answered as none. */
export const readFailed = (log: Log["Type"], app: string, id: string) => (failure: StoreFailure) =>
  Effect.sync(() => log.error("responses.read_failed", { app, id, reason: failure.reason })).pipe(Effect.as(Option.none<StoredRecord>()))

export const answeredAsFailed = (log: Log["Type"], record: StoredRecord) => (cause: Cause.Cause<StoreFailure>) => {
  const reason = Option.match(Cause.failureOption(cause), { onNone: () => "defect", onSome: (failure) => failure.reason })
  log.error("responses.store_failed", { app: record.app, id: record.id, reason })
  return Effect.succeed("failed" as const)
}

/** The answer to a request whose stored response the database could not read or change (the cause is logged, not sent). */
export const storeUnavailable = (log: Log["Type"], event: string, fields: Record<string, unknown>) => (_error: unknown) =>
  Effect.suspend(() => {
    log.error(event, { ...fields, reason: "database" })
    return Effect.fail(Errors.databaseUnavailable("Stored responses"))
  })

/** `Effect.catchSomeDefect` for a failed COMMIT, which @effect/sql turns into a defect: it stays a typed failure. */
export const commitDefect = (defect: unknown) => (defect instanceof SqlError ? Option.some(Effect.fail(defect)) : Option.none())
