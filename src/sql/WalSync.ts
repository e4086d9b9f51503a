import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, FiberRef, Layer, type Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"

/**
 * Commits made durable off the event loop, for writers that commit for many callers at once
 * (group commit). The database runs `synchronous=FULL`: every commit is fsynced, but on the event
 * loop (better-sqlite3 is synchronous), so nothing else runs meanwhile and no caller can join a
 * commit already under way. A transaction run inside `withDeferredSync` is committed to the WAL
 * without that fsync (`synchronous=NORMAL` from its BEGIN to its end, FULL again after); `sync`
 * then fsyncs the WAL on the thread pool while the event loop keeps serving, and the callers
 * arriving meanwhile form the next group. Until `sync` returns, such a commit is visible and
 * survives a crash of the process but not necessarily a power loss: acknowledge nothing before.
 */

/** set by `withDeferredSync`; read by the connection when it runs BEGIN, COMMIT and ROLLBACK */
export const deferredSync = FiberRef.unsafeMake(false)

/** Run `effect` (one `withTransaction`) so that its commit is not fsynced: call `WalSync.sync` before acknowledging it. */
export const withDeferredSync = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => Effect.locally(effect, deferredSync, true)

export class WalSync extends Context.Tag("gateway/WalSync")<
  WalSync,
  {
    /** every commit made before the call is on disk when it returns */
    readonly sync: Effect.Effect<void, SqlError>
  }
>() {
  /**
   * For the database `filename` in WAL mode (with the WAL off, every commit is fsynced and this
   * does nothing). The WAL is opened on the first sync and kept open: SQLite keeps the same file
   * while the database is open (it deletes it only when the last connection closes).
   */
  static readonly make = (filename: string, options: { readonly wal: boolean } = { wal: true }): Effect.Effect<WalSync["Type"], never, Scope.Scope> =>
    Effect.gen(function* () {
      if (!options.wal) return WalSync.of({ sync: Effect.void })
      let handle: Promise<fs.promises.FileHandle> | undefined
      let directorySynced = false
      yield* Effect.addFinalizer(() => Effect.promise(async () => (await handle?.catch(() => undefined))?.close().catch(() => undefined)))
      const open = () => {
        const opened = fs.promises.open(`${filename}-wal`, "r")
        opened.catch(() => {
          if (handle === opened) handle = undefined
        })
        return opened
      }
      return WalSync.of({
        sync: Effect.tryPromise({
          try: async () => {
            handle ??= open()
            await (await handle).datasync()
            // the WAL is created with the first write after the database opens: its directory entry
            // must reach the disk too (SQLite syncs the directory on the WAL's first fsync, which
            // under NORMAL may not happen before a checkpoint)
            if (!directorySynced) {
              const directory = await fs.promises.open(path.dirname(filename), "r")
              try {
                await directory.sync()
              } finally {
                await directory.close()
              }
              directorySynced = true
            }
          },
          catch: (cause) => new SqlError({ cause, message: "Failed to sync the WAL" })
        })
      })
    })

  static readonly layer = (filename: string, options?: { readonly wal: boolean }) => Layer.scoped(WalSync, WalSync.make(filename, options))
}
