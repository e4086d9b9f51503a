import type { SqlError } from "@effect/sql/SqlError"
import { Context, Duration, Effect, Option, Schema, type Scope } from "effect"
import * as SqliteThread from "./kit/SqliteThread.js"

/**
 * WAL checkpoints off the event loop. By default SQLite checkpoints from the connection that
 * commits, inside the COMMIT, once the WAL holds 1000 pages: copying those pages into the database
 * and fsyncing it, on the event loop (better-sqlite3 is synchronous), while every request waits.
 * The gateway's connection runs with `wal_autocheckpoint = 0` instead, and a connection of its
 * own on a worker thread runs a PASSIVE checkpoint every `everyMs`: it copies whatever the WAL
 * holds that no reader still needs, never waiting for the writer nor making it wait. The writer
 * starts the WAL over from its beginning at its first commit after a checkpoint that copied
 * everything, so the WAL holds at most what was written between two checkpoints (plus what was
 * written while a long read, such as a usage report, kept older pages needed).
 */

/** The answer of `PRAGMA wal_checkpoint(PASSIVE)`: https://sqlite.org/pragma.html#pragma_wal_checkpoint */
export interface CheckpointResult {
  /** another checkpoint was running (nothing done) */
  readonly busy: boolean
  /** frames in the WAL */
  readonly walFrames: number
  /** of them, frames now copied into the database */
  readonly checkpointed: number
}

/** how often a checkpoint runs (SQLite's own runs at most once per 1000 pages committed) */
export const CHECKPOINT_EVERY_MS = 1_000

const Answer = Schema.Tuple(Schema.Number, Schema.Number, Schema.Number)

export class WalCheckpoints extends Context.Tag("gateway/WalCheckpoints")<
  WalCheckpoints,
  {
    /** a PASSIVE checkpoint now, on the checkpoint thread */
    readonly run: Effect.Effect<CheckpointResult, SqlError>
    /** checkpoints run so far (by the timer or `run`) and the last one's answer */
    readonly stats: () => { readonly runs: number; readonly last: Option.Option<CheckpointResult> }
  }
>() {
  /**
   * The checkpointer of the WAL database `filename` (opened with `driver`). Its thread opens on
   * the first checkpoint and is closed with the scope: make it before the gateway's own connection
   * opens, so that it closes after that connection and the final checkpoint (the last connection
   * to close copies the whole WAL and removes it) is made on its thread too. `start` forks the
   * timer, to be run once the database is open.
   */
  static readonly make = (
    driver: string,
    filename: string,
    options: { readonly everyMs?: number } = {}
  ): Effect.Effect<{ readonly service: WalCheckpoints["Type"]; readonly start: Effect.Effect<void, never, Scope.Scope> }, never, Scope.Scope> =>
    Effect.gen(function* () {
      // FULL: the WAL is fsynced before its pages are copied, the database after
      const thread = yield* SqliteThread.make({ driver, filename, readonly: false, pragmas: ["synchronous = FULL"] })
      let runs = 0
      let last = Option.none<CheckpointResult>()
      const run = Effect.gen(function* () {
        const rows = yield* thread.query("PRAGMA wal_checkpoint(PASSIVE)", [], { values: true })
        const [busy, walFrames, checkpointed] = yield* Schema.decodeUnknown(Answer)(rows[0]).pipe(Effect.orDie)
        const result: CheckpointResult = { busy: busy !== 0, walFrames, checkpointed }
        runs++
        last = Option.some(result)
        return result
      })
      const every = Duration.millis(options.everyMs ?? CHECKPOINT_EVERY_MS)
      // a failed checkpoint (a full disk) leaves the pages in the WAL for the next one: nothing is
      // lost, and the writer meets the same failure at its own commit, where it is reported
      const start = Effect.asVoid(Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(every), Effect.exit(run)))))
      return { service: WalCheckpoints.of({ run, stats: () => ({ runs, last }) }), start }
    })

  /** Without a WAL (every commit writes the database itself): nothing to checkpoint. */
  static readonly none: WalCheckpoints["Type"] = WalCheckpoints.of({
    run: Effect.succeed({ busy: false, walFrames: 0, checkpointed: 0 }),
    stats: () => ({ runs: 0, last: Option.none() })
  })
}
