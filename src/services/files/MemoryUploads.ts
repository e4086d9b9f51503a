import { Clock, Effect, Exit, Option } from "effect"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import type { Stage, StageOptions, Upload, Uploads } from "./FileStore.js"
import { MAX_UNFINISHED_UPLOADS, tooManyUploads, UPLOAD_TTL_MS, uploadBusy } from "./Common.js"

interface Held {
  readonly upload: Omit<Upload, "size">
  readonly expiresAt: number
  readonly stage: Stage
  /** a request is writing a chunk: the next one must wait for its offset */
  busy: boolean
}

/**
 * Unfinished uploads of this process (SQLite: one process owns the data directory): each is an
 * open stage, dropped by expiry, by its key's revocation and when the store closes (the store
 * removes partial bytes at start).
 */
export const makeMemoryUploads = (stage: (options: StageOptions) => Effect.Effect<Stage, GatewayError>) =>
  Effect.gen(function* () {
    const uploads = new Map<string, Held>()

    const drop = (held: Held) =>
      Effect.suspend(() => {
        uploads.delete(held.upload.id)
        return held.stage.discard
      })
    const view = (held: Held): Upload => ({ ...held.upload, size: held.stage.size() })

    yield* Effect.addFinalizer(() => Effect.forEach([...uploads.values()], drop, { discard: true }))

    return {
      start: (options) =>
        Effect.gen(function* () {
          const unfinished = [...uploads.values()].filter((u) => u.upload.app === options.app).length
          if (unfinished >= MAX_UNFINISHED_UPLOADS) return yield* tooManyUploads()
          const id = randomHex(16)
          const now = yield* Clock.currentTimeMillis
          const upload = { id, app: options.app, keyId: options.keyId, filename: options.filename, ...(options.displayName ? { displayName: options.displayName } : {}) }
          // opened and registered in one step, so a request ended meanwhile cannot lose the open file
          const opened = yield* stage(options).pipe(
            Effect.tap((s) => Effect.sync(() => void uploads.set(id, { upload, expiresAt: now + UPLOAD_TTL_MS, stage: s, busy: false }))),
            Effect.uninterruptible
          )
          return { ...upload, size: opened.size() }
        }),
      find: (id) => Effect.sync(() => Option.map(Option.fromNullable(uploads.get(id)), view)),
      claim: (upload, offset, wrongOffset) =>
        Effect.gen(function* () {
          const held = uploads.get(upload.id)
          if (held === undefined) return yield* Errors.notFound("not_found", `No upload ${upload.id} is in progress`)
          if (held.busy) return yield* uploadBusy()
          const size = held.stage.size()
          if (offset !== undefined && offset !== size) return yield* wrongOffset(size)
          let finished = false
          yield* Effect.acquireRelease(
            Effect.sync(() => void (held.busy = true)),
            (_, exit) =>
              Effect.suspend(() => {
                held.busy = false
                return Exit.isFailure(exit) && !finished ? drop(held) : Effect.void
              })
          )
          return {
            size: held.stage.size,
            write: held.stage.write,
            finish: held.stage.finish.pipe(
              Effect.tap(() =>
                Effect.sync(() => {
                  finished = true
                  uploads.delete(held.upload.id)
                })
              )
            )
          }
        }),
      dropKey: (keyId) => Effect.forEach([...uploads.values()].filter((held) => held.upload.keyId === keyId), drop, { discard: true }),
      expire: Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        for (const held of [...uploads.values()]) if (held.expiresAt <= now && !held.busy) yield* drop(held)
      })
    } satisfies Uploads
  })
